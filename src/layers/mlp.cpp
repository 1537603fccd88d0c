#include "layers/mlp.h"

#include <cstring>

#include "loader/weight_source.h"

namespace tessera::layers {

StatusOr<GatedMlp> GatedMlp::load(const loader::WeightSource& source, const MlpSpec& s) {
    GatedMlp mlp;
    TSR_ASSIGN_OR_RETURN(mlp.gate_up_,
                         Linear::load(source, {{{s.gate, s.intermediate, s.slice.begin, s.slice.count},
                                                {s.up, s.intermediate, s.slice.begin, s.slice.count}},
                                               s.hidden, 0, -1, false, s.compute_dtype}));
    TSR_ASSIGN_OR_RETURN(mlp.down_, Linear::load(source, {{{s.down, s.hidden}}, s.intermediate, s.slice.begin,
                                                          s.slice.count, false, s.compute_dtype}));
    return mlp;
}

StatusOr<GatedMlp> GatedMlp::load_dense(const loader::WeightSource& source, const std::string& prefix,
                                        std::int64_t hidden, std::int64_t intermediate, DType compute_dtype,
                                        const LayerParallel& par) {
    TSR_ASSIGN_OR_RETURN(Range slice, even_shard("intermediate_size", intermediate, par.tp));
    return load(source, {prefix + "gate_proj.weight", prefix + "up_proj.weight", prefix + "down_proj.weight", hidden,
                         intermediate, slice, compute_dtype});
}

std::size_t GatedMlp::packed_bytes() const {
    std::size_t bytes = 0;
    for (const Linear* l : {&gate_up_, &down_})
        for (auto run : l->packed()) bytes += run.size();
    return bytes;
}

void GatedMlp::copy_packed_to(std::byte* dst) const {
    for (const Linear* l : {&gate_up_, &down_}) {
        for (auto run : l->packed()) {
            if (run.empty()) continue;
            std::memcpy(dst, run.data(), run.size());
            dst += run.size();
        }
    }
}

void GatedMlp::copy_packed_from(const std::byte* src) {
    for (Linear* l : {&gate_up_, &down_}) {
        for (auto run : l->packed()) {
            if (run.empty()) continue;
            std::memcpy(run.data(), src, run.size());
            src += run.size();
        }
    }
}

void GatedMlp::copy_weights_from(const GatedMlp& other) {
    const Linear* from[] = {&other.gate_up_, &other.down_};
    Linear* to[] = {&gate_up_, &down_};
    for (int i = 0; i < 2; ++i) {
        const auto src = from[i]->packed();
        const auto dst = to[i]->packed();
        for (std::size_t r = 0; r < dst.size(); ++r)
            if (!dst[r].empty()) std::memcpy(dst[r].data(), src[r].data(), dst[r].size());
    }
}

double GatedMlp::flops_per_token() const {
    return 2.0 * (static_cast<double>(gate_up_.in_features()) * gate_up_.out_features() +
                  static_cast<double>(down_.in_features()) * down_.out_features());
}

void GatedMlp::forward(const float* x, std::int64_t m, float* out, Scratch& scratch, ThreadPool* pool) const {
    forward(x, m, out, scratch.mlp, pool);
}

void GatedMlp::forward(const float* x, std::int64_t m, float* out, MlpBuffers& buffers, ThreadPool* pool) const {
    forward(LayerInput{.x = x}, m, out, buffers, pool);
}

void GatedMlp::forward(const LayerInput& input, std::int64_t m, float* out, MlpBuffers& buffers,
                       ThreadPool* pool) const {
    buffers.gate_up.resize(static_cast<std::size_t>(gate_up_rows_floats(m)));
    gate_up_.forward_gated_mlp(input, m, down_, buffers.gate_up.data(), out, pool);
}

Status GatedMlp::forward_reduced(const LayerInput& input, std::int64_t m, float* out, Scratch& scratch,
                                 ThreadPool* pool, const LayerParallel& par) const {
    forward(input, m, out, scratch.mlp, pool);
    return par.all_reduce({out, static_cast<std::size_t>(m * down_.out_features())});
}

}  // namespace tessera::layers
