#pragma once
// tokenizer/pretokenizer.h — the "Split" pre-tokenizer of byte-level BPE tokenizer.json
// files: cuts text into the pieces that BPE then encodes one by one. The regex of the file
// is not interpreted; the patterns in use are recognised and run as a hand-written matcher
// over code points (Unicode classes from ICU), which is what makes encoding fast.
// Immutable after construction; thread-safe.

#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::tokenizer {

enum class SplitPattern {
    // Qwen2 / Qwen3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
    //                 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    kQwen2,
    // Llama 3: the same with \p{N}{1,3} (numbers in groups of up to three digits).
    kLlama3,
};

// The pattern for a tokenizer.json Split `pattern.Regex` string; Unimplemented naming the
// regex when it is not one of the recognised patterns.
StatusOr<SplitPattern> split_pattern_from_regex(std::string_view regex);

class PreTokenizer {
 public:
    explicit PreTokenizer(SplitPattern pattern) : pattern_(pattern) {}

    // Appends to `pieces` the consecutive pieces of `text` (valid UTF-8) in order; they
    // cover `text` exactly and point into it (Split behaviour "Isolated").
    void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
    SplitPattern pattern_;
};

}  // namespace tessera::tokenizer
