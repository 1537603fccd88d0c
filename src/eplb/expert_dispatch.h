#pragma once
// eplb/expert_dispatch.h — which physical copy serves a token's logical expert
// (--ep-dispatch-algorithm; SGLang's eplb/expert_location_dispatch.py
// `topk_ids_logical_to_physical`):
//   static: a per-rank table (expert_location.py `compute_logical_to_rank_dispatch_physical_map`):
//     a rank holding a copy uses it; the ranks with none share the copies fairly (each copy
//     ⌊k/n⌋ times plus a seeded sample of the rest, shuffled), seed 42;
//   dynamic: a copy picked by a hash of (token row, pass), which every rank computes the same
//     (SGLang draws a random copy per token on each rank; with masked EP the ranks must agree);
//   fake: dynamic, after the router's logits were replaced by uniform noise in [5, 10) and
//     the correction bias dropped (a load test; see router_noise()).
// A token's table row is its owner's — the rank that routes it under the all_to_all
// dispatcher, token row / ⌈rows / ep⌉ — so both dispatchers send a token to the same copy and
// under masked EP (every rank routes every token) all ranks agree on it. Immutable; thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "eplb/expert_location.h"

namespace tessera::eplb {

enum class DispatchAlgorithm { kStatic, kDynamic, kFake };

StatusOr<DispatchAlgorithm> parse_dispatch_algorithm(const std::string& name);
const char* dispatch_algorithm_name(DispatchAlgorithm algorithm);

class ExpertDispatch {
 public:
    ExpertDispatch(std::shared_ptr<const ExpertLocation> location, DispatchAlgorithm algorithm);

    const ExpertLocation& location() const { return *location_; }
    DispatchAlgorithm algorithm() const { return algorithm_; }

    // ids I32 [n, top_k]: logical in, physical out, for decoder layer `layer`. Row t of ids
    // is token row0 + t of forward pass `pass`, which has `rows` tokens. `static` picks from
    // the table of the EP rank that sends the rows: `owner`, or (-1) the rank whose even share
    // of the pass's rows holds the row, as the TP path splits them.
    void to_physical(std::int64_t layer, std::int32_t* ids, std::int64_t n, std::int64_t top_k, std::int64_t row0,
                     std::int64_t rows, std::int64_t pass, int owner = -1) const;

    // [ep_size, num_layers, num_logical]: the static tables of every rank.
    const std::vector<std::int32_t>& static_table() const { return static_table_; }

 private:
    std::shared_ptr<const ExpertLocation> location_;
    DispatchAlgorithm algorithm_;
    std::vector<std::int32_t> static_table_;
};

// `fake`: logits f32 [n, num_experts] of token rows row0.. replaced by uniform noise in
// [5, 10), the same on every rank for the same (pass, layer, row, expert).
void router_noise(float* logits, std::int64_t n, std::int64_t num_experts, std::int64_t row0, std::int64_t layer,
                  std::int64_t pass);

}  // namespace tessera::eplb
