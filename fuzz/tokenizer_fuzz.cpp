// libFuzzer target: any bytes through the Qwen3 and DeepSeek-V3 tokenizers (one split
// pattern, and a sequence of three): encode (with and without special tokens), decode of the
// ids, and decode of arbitrary ids from the input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::vector<std::unique_ptr<tessera::tokenizer::Tokenizer>> tokenizers = [] {
        std::vector<std::unique_ptr<tessera::tokenizer::Tokenizer>> loaded;
        for (const char* name : {"/qwen3", "/deepseek_v3", "/mistral"}) {
            auto t = tessera::tokenizer::Tokenizer::load(std::string(TSR_FUZZ_ASSETS) + name);
            if (t.ok()) loaded.push_back(std::move(t).value());
        }
        return loaded;
    }();
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    for (const auto& tok : tokenizers) {
        for (bool special : {false, true}) {
            const std::vector<std::int32_t> ids = tok->encode(text, special);
            (void)tok->decode(ids, !special);
        }
        std::vector<std::int32_t> raw(size / 4);
        if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
        for (auto& id : raw)
            id = static_cast<std::int32_t>(static_cast<std::uint32_t>(id) % static_cast<std::uint32_t>(tok->vocab_size()));
        (void)tok->decode(raw, false);
    }
    return 0;
}
