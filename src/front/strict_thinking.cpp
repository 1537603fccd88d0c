#include "front/strict_thinking.h"

#include <charconv>
#include <string>

#include "base/env.h"

namespace tessera::front {

StatusOr<std::shared_ptr<const std::vector<std::uint32_t>>> strict_thinking_filter(
    const server::ReasoningFormat& format, const tokenizer::Tokenizer& tokenizer, std::int64_t vocab_size) {
    const std::vector<std::int32_t> end = tokenizer.encode(format.think_end, /*add_special_tokens=*/false);
    if (end.empty())
        return Status::InvalidArgument("think_end_token '" + format.think_end +
                                       "' could not be encoded by the tokenizer.");
    if (end.size() != 1)
        return Status::InvalidArgument("think_end_token '" + format.think_end +
                                       "' must encode to exactly one token for constrained reasoning.");
    if (format.think_excluded_tokens.empty()) return std::shared_ptr<const std::vector<std::uint32_t>>();
    auto allowed = std::make_shared<std::vector<std::uint32_t>>(static_cast<std::size_t>((vocab_size + 31) / 32), ~0u);
    if (vocab_size % 32 != 0) allowed->back() = (1u << (vocab_size % 32)) - 1;
    for (const std::string& text : format.think_excluded_tokens) {
        const std::vector<std::int32_t> ids = tokenizer.encode(text, /*add_special_tokens=*/false);
        if (ids.empty())
            return Status::InvalidArgument("think_excluded_token '" + text +
                                           "' could not be encoded by the tokenizer. Check the reasoning parser's "
                                           "think_excluded_tokens for this model.");
        for (const std::int32_t id : ids)
            if (id >= 0 && id < vocab_size) (*allowed)[static_cast<std::size_t>(id) / 32] &= ~(1u << (id % 32));
    }
    return std::shared_ptr<const std::vector<std::uint32_t>>(std::move(allowed));
}

StatusOr<std::int64_t> default_thinking_budget() {
    const std::optional<std::string>& text = env().max_think_tokens;
    if (!text) return -1;
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (error != std::errc() || end != text->data() + text->size())
        return Status::InvalidArgument("SGLANG_MAX_THINK_TOKENS must be an integer, got '" + *text + "'");
    return value;
}

}  // namespace tessera::front
