// tokenizer/incremental_detokenizer.cpp — IncrementalDetokenizer (declared in tokenizer.h).
//
// Tokenizer::decode joins the bytes of all kept tokens and replaces each maximal invalid
// UTF-8 subpart with U+FFFD. The same scan run over a growing byte stream makes the same
// decisions as soon as a character is complete or provably invalid; only a tail that is still
// a valid prefix of a character (at most 3 bytes) must wait. So emitting everything before
// that tail, and the tail (replaced) at flush(), concatenates to exactly decode(ids).
// SentencePiece-style tokenizers add two rules of their decoder chain: a run of byte-fallback
// tokens is held until it ends (an invalid run becomes one U+FFFD per byte, so no byte of it
// is final before then), and the first leading spaces of the text are dropped (Strip).

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tessera::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_tokens_(skip_special_tokens),
      strip_remaining_(tokenizer.leading_spaces_stripped()) {}

void IncrementalDetokenizer::resolve_fallback_run() {
    if (fallback_run_.empty()) return;
    if (is_valid_utf8(fallback_run_)) {
        pending_ += fallback_run_;
    } else {
        for (std::size_t i = 0; i < fallback_run_.size(); ++i) pending_ += "\xEF\xBF\xBD";
    }
    fallback_run_.clear();
}

std::string IncrementalDetokenizer::strip_leading(std::string text) {
    std::size_t n = 0;
    while (strip_remaining_ > 0 && n < text.size()) {
        if (text[n] != ' ') {
            strip_remaining_ = 0;
            break;
        }
        ++n;
        --strip_remaining_;
    }
    text.erase(0, n);
    return text;
}

std::string IncrementalDetokenizer::add(std::int32_t id) {
    if (skip_special_tokens_ && tokenizer_.is_special(id)) return "";
    const std::string bytes = tokenizer_.token_bytes(id);
    if (bytes.empty()) return "";  // an id outside the vocabulary: dropped, as decode() does
    if (tokenizer_.is_fallback_byte(id)) {
        fallback_run_ += bytes;
        return "";
    }
    resolve_fallback_run();
    pending_ += bytes;
    std::string out;
    const std::size_t tail = utf8_append_complete(pending_, out);
    pending_.erase(0, pending_.size() - tail);
    return strip_leading(std::move(out));
}

std::string IncrementalDetokenizer::flush() {
    resolve_fallback_run();
    std::string out = utf8_replace_invalid(pending_);
    pending_.clear();
    return strip_leading(std::move(out));
}

}  // namespace tessera::tokenizer
