#pragma once
// base/env.h — the one place environment variables are read. EnvFlags is loaded once
// (first call to env()) and is read-only afterwards; safe from any thread.

#include <string>

namespace tessera {

struct EnvFlags {
    // env: TSR_KERNEL_ISA — force a kernel path: "avx512" (AVX-512 BF16), "avx2", "reference".
    // Empty: the best the CPU supports.
    std::string kernel_isa;
    // env: TSR_TOKENIZER_ASSETS — folder with <name>/tokenizer.json for make-model.
    std::string tokenizer_assets;
    // env: TSR_LOG_LEVEL — debug, info, warn, error.
    std::string log_level;
};

const EnvFlags& env();

}  // namespace tessera
