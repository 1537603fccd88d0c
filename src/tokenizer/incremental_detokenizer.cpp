// tokenizer/incremental_detokenizer.cpp — IncrementalDetokenizer (declared in tokenizer.h).
//
// Tokenizer::decode joins the bytes of all kept tokens and replaces each maximal invalid
// UTF-8 subpart with U+FFFD. The same scan run over a growing byte stream makes the same
// decisions as soon as a character is complete or provably invalid; only a tail that is still
// a valid prefix of a character (at most 3 bytes) must wait. So emitting everything before
// that tail, and the tail (replaced) at flush(), concatenates to exactly decode(ids).

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tessera::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::add(std::int32_t id) {
    if (skip_special_tokens_ && tokenizer_.is_special(id)) return "";
    pending_ += tokenizer_.token_bytes(id);
    std::string out;
    const std::size_t tail = utf8_append_complete(pending_, out);
    pending_.erase(0, pending_.size() - tail);
    return out;
}

std::string IncrementalDetokenizer::flush() {
    std::string out = utf8_replace_invalid(pending_);
    pending_.clear();
    return out;
}

}  // namespace tessera::tokenizer
