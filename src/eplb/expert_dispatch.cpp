#include "eplb/expert_dispatch.h"

#include <algorithm>

#include "eplb/python_random.h"

namespace tessera::eplb {

StatusOr<DispatchAlgorithm> parse_dispatch_algorithm(const std::string& name) {
    if (name == "static") return DispatchAlgorithm::kStatic;
    if (name == "dynamic") return DispatchAlgorithm::kDynamic;
    if (name == "fake") return DispatchAlgorithm::kFake;
    if (name == "lp" || name == "random")
        return Status::Unimplemented("--ep-dispatch-algorithm " + name +
                                     " is not implemented yet; use static, dynamic or fake");
    return Status::InvalidArgument("--ep-dispatch-algorithm " + name + ": expected static, dynamic or fake");
}

const char* dispatch_algorithm_name(DispatchAlgorithm algorithm) {
    switch (algorithm) {
        case DispatchAlgorithm::kStatic: return "static";
        case DispatchAlgorithm::kDynamic: return "dynamic";
        case DispatchAlgorithm::kFake: return "fake";
    }
    return "?";
}

namespace {

using I64 = std::int64_t;

// k choices from `items`: each item ⌊k/n⌋ times, then a sample of k mod n distinct items,
// shuffled (expert_location.py `_fair_choices`).
std::vector<std::int32_t> fair_choices(const std::vector<std::int32_t>& items, I64 k, PythonRandom& rng) {
    std::vector<std::int32_t> out;
    const auto n = static_cast<I64>(items.size());
    for (I64 r = 0; r < k / n; ++r) out.insert(out.end(), items.begin(), items.end());
    const std::vector<std::int32_t> rest = rng.sample(items, k % n);
    out.insert(out.end(), rest.begin(), rest.end());
    rng.shuffle(out);
    return out;
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace

ExpertDispatch::ExpertDispatch(std::shared_ptr<const ExpertLocation> location, DispatchAlgorithm algorithm)
    : location_(std::move(location)), algorithm_(algorithm) {
    if (algorithm_ != DispatchAlgorithm::kStatic) return;
    const ExpertLocation& loc = *location_;
    const I64 L = loc.num_layers(), E = loc.num_logical(), X = loc.max_copies();
    const int ep = loc.ep_size();
    static_table_.assign(static_cast<std::size_t>(ep * L * E), -1);
    PythonRandom rng(42);  // one generator for the whole table, as SGLang's
    for (I64 l = 0; l < L; ++l) {
        for (I64 e = 0; e < E; ++e) {
            const std::int32_t* copies = loc.log2phy(l) + e * X;
            std::vector<std::int32_t> all(copies, copies + loc.logcnt(l)[e]);
            std::vector<int> without;  // ranks holding no copy
            for (int r = 0; r < ep; ++r) {
                auto local = std::find_if(all.begin(), all.end(),
                                          [&](std::int32_t p) { return loc.rank_of_physical(p) == r; });
                if (local != all.end()) {
                    static_table_[(r * L + l) * E + e] = *local;
                } else {
                    without.push_back(r);
                }
            }
            if (without.empty()) continue;
            const std::vector<std::int32_t> picks = fair_choices(all, static_cast<I64>(without.size()), rng);
            for (std::size_t i = 0; i < without.size(); ++i) static_table_[(without[i] * L + l) * E + e] = picks[i];
        }
    }
}

void ExpertDispatch::to_physical(I64 layer, std::int32_t* ids, I64 n, I64 top_k, I64 row0, I64 rows, I64 pass,
                                 int owner) const {
    const ExpertLocation& loc = *location_;
    const I64 E = loc.num_logical(), X = loc.max_copies();
    const std::int32_t* log2phy = loc.log2phy(layer);
    const std::int32_t* logcnt = loc.logcnt(layer);
    const int ep = loc.ep_size();
    const I64 per_owner = std::max<I64>(1, (rows + ep - 1) / ep);
    const I64 L = loc.num_layers();
    for (I64 t = 0; t < n; ++t) {
        const I64 row = row0 + t;
        for (I64 j = 0; j < top_k; ++j) {
            std::int32_t& id = ids[t * top_k + j];
            if (algorithm_ == DispatchAlgorithm::kStatic) {
                const I64 sender = owner >= 0 ? owner : std::min<I64>(ep - 1, row / per_owner);
                id = static_table_[(sender * L + layer) * E + id];
            } else {
                const std::uint64_t pick = mix(static_cast<std::uint64_t>(pass) * 0x100000001B3ull + static_cast<std::uint64_t>(row));
                id = log2phy[id * X + static_cast<I64>(pick % static_cast<std::uint64_t>(logcnt[id]))];
            }
        }
    }
}

void router_noise(float* logits, I64 n, I64 num_experts, I64 row0, I64 layer, I64 pass) {
    for (I64 t = 0; t < n; ++t) {
        const std::uint64_t base = mix(mix(static_cast<std::uint64_t>(pass)) ^ mix(static_cast<std::uint64_t>(layer) << 32) ^
                                       static_cast<std::uint64_t>(row0 + t));
        for (I64 e = 0; e < num_experts; ++e) {
            const std::uint64_t bits = mix(base + static_cast<std::uint64_t>(e));
            logits[t * num_experts + e] = 5.0f + 5.0f * static_cast<float>(bits >> 40) / static_cast<float>(1ull << 24);
        }
    }
}

}  // namespace tessera::eplb
