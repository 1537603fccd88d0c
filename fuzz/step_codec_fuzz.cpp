// libFuzzer target: bytes → the step wire format a TP follower or a pipeline stage decodes.
// A corrupt message must be DataLoss, and what decodes must encode back to the same bytes.
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
    (void)tessera::executor::decode_results(bytes);
    return 0;
}
