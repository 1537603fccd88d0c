#include "layers/parallel.h"

#include "dist/process_group.h"

namespace tessera::layers {

StatusOr<MoeA2aBackend> parse_moe_a2a_backend(const std::string& name) {
    if (name == "none") return MoeA2aBackend::kNone;
    // DeepEP's GPU kernels (normal and low-latency alike) send each token to its experts' ranks
    // and back: the exchange tessera's all_to_all runs.
    if (name == "all_to_all" || name == "deepep") return MoeA2aBackend::kAllToAll;
    return Status::InvalidArgument("--moe-a2a-backend " + name +
                                   " is a GPU backend of SGLang; this build supports none, all_to_all and deepep "
                                   "(run as all_to_all)");
}

const char* moe_a2a_backend_name(MoeA2aBackend backend) {
    return backend == MoeA2aBackend::kNone ? "none" : "all_to_all";
}

Status LayerParallel::all_reduce(std::span<float> data) const {
    if (tp_group == nullptr || defer_reduce) return Status::Ok();
    return tp_group->all_reduce(data);
}

}  // namespace tessera::layers
