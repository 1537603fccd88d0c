#pragma once
// dist/pp_partition.h — which decoder layers each pipeline stage owns (reference §6.1,
// SGLang's get_pp_indices). Stage i of pp_size runs layers [begin, end); stage 0 also owns the
// token embedding, the last stage the final norm and the LM head.
//   * default: base = L / pp, rem = L % pp; the LAST rem stages get base + 1 layers (the
//     later stages get the spare layers, as SGLang's docs advise for a balanced pipeline);
//   * SGLANG_PP_LAYER_PARTITION = "a,b,c,...": stage i gets p[i] layers starting at
//     p[0] + ... + p[i-1]; exactly pp_size positive entries summing to L.
// Pure functions; thread-safe.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::dist {

// Half-open range of decoder-layer indices [begin, end) run by one pipeline stage.
struct LayerRange {
    int begin = 0;
    int end = 0;

    int size() const { return end - begin; }
    bool contains(int layer) const { return layer >= begin && layer < end; }
    bool operator==(const LayerRange&) const = default;
};

// The layers of `pp_rank`. `partition` is the raw SGLANG_PP_LAYER_PARTITION value
// (env().pp_layer_partition); nullopt selects the default split. Errors (InvalidArgument)
// name the variable, the value and what would be accepted. Every stage gets at least one
// layer, so pp_size > num_layers is rejected.
StatusOr<LayerRange> pp_layer_range(int num_layers, int pp_rank, int pp_size,
                                    const std::optional<std::string>& partition);

// All pp_size ranges, stage 0 first; they tile [0, num_layers) without gaps or overlap.
StatusOr<std::vector<LayerRange>> pp_layer_ranges(int num_layers, int pp_size,
                                                  const std::optional<std::string>& partition);

// The first stage looks the input tokens up in the embedding table.
inline bool owns_embedding(int pp_rank) { return pp_rank == 0; }
// The last stage applies the final norm and the LM head and samples.
inline bool owns_lm_head(int pp_rank, int pp_size) { return pp_rank == pp_size - 1; }

}  // namespace tessera::dist
