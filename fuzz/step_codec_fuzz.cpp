// libFuzzer target: bytes → the step wire format a TP follower or a pipeline stage decodes.
// A corrupt message must be DataLoss, and what decodes must encode back to the same bytes
// (also a DP-attention step with every group's counts ahead of it, and the results sent back).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "executor/step_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::vector<std::uint8_t> bytes(data, data + size);
    std::int64_t flags = 0;
    auto batch = tessera::executor::decode_step(bytes, &flags);
    if (batch.ok() && tessera::executor::encode_step(*batch, flags) != bytes) std::abort();
    // Sampled tokens (or an embedding model's rows) coming back: the same rule.
    auto results = tessera::executor::decode_results(bytes);
    if (results.ok() && tessera::executor::encode_results(*results) != bytes) std::abort();
    // DP-attention under PP: every group's counts ahead of the step.
    std::vector<std::uint8_t> rest;
    auto groups = tessera::executor::decode_dp_step(bytes, &rest);
    if (groups.ok() && tessera::executor::encode_dp_step(*groups, rest) != bytes) std::abort();
    return 0;
}
