#include "tokenizer/output_stream.h"

#include <algorithm>

namespace tessera::tokenizer {

namespace {
// Length of the longest suffix of `text` that is a proper prefix of some stop string.
std::size_t partial_stop_suffix(const std::string& text, const std::vector<std::string>& stop) {
    std::size_t best = 0;
    for (const auto& s : stop) {
        for (std::size_t len = std::min(text.size(), s.size() - 1); len > best; --len) {
            if (text.compare(text.size() - len, len, s, 0, len) == 0) {
                best = len;
                break;
            }
        }
    }
    return best;
}

// Never split a UTF-8 sequence when holding back bytes.
std::size_t utf8_safe_cut(const std::string& text, std::size_t cut) {
    while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    return cut;
}
}  // namespace

OutputStream::OutputStream(const Tokenizer& tokenizer, bool skip_special_tokens, std::vector<std::string> stop)
    : detok_(tokenizer, skip_special_tokens), stop_(std::move(stop)) {
    std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
    for (const auto& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

OutputStream::Delta OutputStream::add(std::int32_t token) {
    Delta delta;
    if (stopped_) return delta;
    held_ += detok_.add(token);
    if (stop_.empty()) {
        delta.text.swap(held_);
        return delta;
    }
    // The earliest stop string occurrence ends the output.
    std::size_t first = std::string::npos;
    const std::string* matched = nullptr;
    for (const auto& s : stop_) {
        const std::size_t at = held_.find(s);
        if (at != std::string::npos && at < first) {
            first = at;
            matched = &s;
        }
    }
    if (matched != nullptr) {
        delta.text = held_.substr(0, first);
        delta.matched_stop = *matched;
        held_.clear();
        stopped_ = true;
        return delta;
    }
    const std::size_t keep = partial_stop_suffix(held_, stop_);
    const std::size_t cut = utf8_safe_cut(held_, held_.size() - keep);
    delta.text = held_.substr(0, cut);
    held_.erase(0, cut);
    return delta;
}

std::string OutputStream::finish() {
    if (stopped_) return "";
    std::string rest = held_ + detok_.flush();
    held_.clear();
    // A stop string may complete only in the flushed tail.
    for (const auto& s : stop_) {
        const std::size_t at = rest.find(s);
        if (at != std::string::npos) rest.resize(at);
    }
    return rest;
}

}  // namespace tessera::tokenizer
