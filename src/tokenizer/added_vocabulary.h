#pragma once
// tokenizer/added_vocabulary.h — the "added_tokens" of tokenizer.json (special tokens such
// as <|im_start|> and plain added tokens such as <think>). They are found in the raw text
// before normalization and BPE, leftmost-longest like HF tokenizers, and are never split.
// Immutable after construction; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::tokenizer {

struct AddedToken {
    std::string content;
    std::int32_t id = -1;
    bool special = false;  // dropped by decode(skip_special_tokens = true)
    bool lstrip = false;   // the match also swallows whitespace on its left
    bool rstrip = false;   // ... and on its right
};

class AddedVocabulary {
 public:
    // One part of the text: either plain text to tokenize (id == -1) or an added token.
    struct Segment {
        std::string_view text;
        std::int32_t id = -1;
    };

    AddedVocabulary() = default;
    explicit AddedVocabulary(const std::vector<AddedToken>& tokens);

    // Appends the segments of `text` in order (no empty text segments).
    void split(std::string_view text, std::vector<Segment>& segments) const;

 private:
    struct Node {
        std::vector<std::pair<unsigned char, std::int32_t>> children;  // byte → node index
        std::int32_t token = -1;  // index into tokens_ when a token ends here
    };

    // Longest token starting at `pos`: index into tokens_ and its length, or -1.
    std::pair<std::int32_t, std::size_t> longest_at(std::string_view text, std::size_t pos) const;

    std::vector<AddedToken> tokens_;
    std::vector<Node> nodes_;      // trie over the token bytes; nodes_[0] is the root
    bool first_byte_[256] = {};    // bytes that start some token
};

}  // namespace tessera::tokenizer
