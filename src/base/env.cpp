#include "base/env.h"

#include <cstdlib>

namespace tessera {

namespace {
std::string read(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}
}  // namespace

const EnvFlags& env() {
    static const EnvFlags flags = [] {
        EnvFlags f;
        f.kernel_isa = read("TSR_KERNEL_ISA");
        f.tokenizer_assets = read("TSR_TOKENIZER_ASSETS");
        f.log_level = read("TSR_LOG_LEVEL");
        return f;
    }();
    return flags;
}

}  // namespace tessera
