#pragma once
// tokenizer/pretokenizer.h — the "Split" pre-tokenizers of byte-level BPE tokenizer.json
// files: cut text into the pieces that BPE then encodes one by one. The regexes of the file
// are not interpreted; the patterns in use are recognised and run as hand-written matchers
// over code points (Unicode classes from ICU), which is what makes encoding fast.
// Immutable after construction; thread-safe.

#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tessera::tokenizer {

enum class SplitPattern {
    // Qwen2 / Qwen3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
    //                 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    kQwen2,
    // Llama 3: the same with \p{N}{1,3} (numbers in groups of up to three digits).
    kLlama3,
    // DeepSeek V3, first step: \p{N}{1,3}
    kDigitGroups,
    // DeepSeek V3, second step: [一-龥぀-ゟ゠-ヿ]+ (U+4E00–U+9FA5, U+3040–U+309F, U+30A0–U+30FF)
    kCjkKana,
    // DeepSeek V3, third step: [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
    //   [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    kDeepSeekV3,
    // GPT-2 (a ByteLevel pre-tokenizer with use_regex): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|
    //   ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    kGpt2,
};

// The pattern for a tokenizer.json Split `pattern.Regex` string; Unimplemented naming the
// regex when it is not one of the recognised patterns.
StatusOr<SplitPattern> split_pattern_from_regex(std::string_view regex);

// A Sequence of Split pre-tokenizers, all with behaviour "Isolated" (a match is a piece, and
// so is each non-empty stretch between matches). As in HF tokenizers, every step after the
// first splits each piece of the step before on its own: a later pattern never sees across
// a boundary that an earlier one made.
class PreTokenizer {
 public:
    explicit PreTokenizer(SplitPattern pattern) : steps_{pattern} {}
    explicit PreTokenizer(std::vector<SplitPattern> steps) : steps_(std::move(steps)) {}

    // Appends to `pieces` the consecutive pieces of `text` (valid UTF-8) in order; they
    // cover `text` exactly and point into it.
    void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
    std::vector<SplitPattern> steps_;  // at least one
};

}  // namespace tessera::tokenizer
