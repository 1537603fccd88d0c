// libFuzzer target: a request's JSON (messages, tools, chat_template_kwargs) rendered by the
// real Qwen3 chat template, and the fuzz input itself compiled and rendered as a template.
// Errors are Status values; renders stay inside the step, size and depth limits.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace {
const tessera::tokenizer::ChatTemplate* qwen3_template() {
    static const std::optional<tessera::tokenizer::ChatTemplate> t = []() -> std::optional<tessera::tokenizer::ChatTemplate> {
        std::ifstream in(TSR_FUZZ_ASSETS "/qwen3/tokenizer_config.json");
        std::stringstream ss;
        ss << in.rdbuf();
        const auto config = nlohmann::json::parse(ss.str(), nullptr, false);
        if (config.is_discarded() || !config.contains("chat_template")) return std::nullopt;
        auto compiled = tessera::tokenizer::ChatTemplate::compile(config["chat_template"].get<std::string>(), "", "<|im_end|>");
        if (!compiled.ok()) return std::nullopt;
        return std::move(compiled).value();
    }();
    return t ? &*t : nullptr;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto request = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!request.is_discarded() && qwen3_template() != nullptr) (void)qwen3_template()->render(request);
    auto own = tessera::tokenizer::ChatTemplate::compile(text, "<s>", "</s>");
    if (own.ok()) (void)own->render(nlohmann::ordered_json{{"messages", nlohmann::ordered_json::array(
                                                                            {{{"role", "user"}, {"content", "hi"}}})}});
    return 0;
}
