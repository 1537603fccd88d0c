#pragma once
// tokenizer/bpe.h — BPE model: merges a pre-tokenized piece into vocabulary ids by
// repeatedly applying the lowest-rank merge (leftmost on ties), like HF tokenizers' BPE. A
// piece starts as its bytes (byte-level vocabularies) or as its UTF-8 characters
// (SentencePiece-style vocabularies such as Mistral's, with byte fallback). A heap over a linked list of symbols keeps long pieces O(n log n), and a
// bounded, sharded word cache serves repeated pieces.
// Immutable after create() except for the cache, which is internally synchronised: all
// methods are thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tessera::tokenizer {

struct BpeOptions {
    bool ignore_merges = false;  // Llama 3: a piece that is a vocabulary entry is emitted as is
    // Initial symbols are UTF-8 characters rather than bytes. A character missing from the
    // vocabulary becomes its bytes' "<0xHH>" tokens with byte_fallback, else the unknown
    // token (consecutive ones fused into one with fuse_unk), else nothing.
    bool char_symbols = false;
    bool byte_fallback = false;
    std::int32_t unk_id = -1;
    bool fuse_unk = false;
};

class BpeModel {
 public:
    // vocab: (raw bytes of the token, id). merges: (left, right) raw bytes, best rank first;
    // each side and their concatenation must be in vocab.
    static StatusOr<std::unique_ptr<BpeModel>> create(
        const std::vector<std::pair<std::string, std::int32_t>>& vocab,
        const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options);

    ~BpeModel();
    BpeModel(const BpeModel&) = delete;
    BpeModel& operator=(const BpeModel&) = delete;

    // Appends the ids of one piece (raw bytes, non-empty). Bytes without a vocabulary
    // entry (none in a complete byte-level vocabulary) are dropped.
    void encode_piece(std::string_view bytes, std::vector<std::int32_t>& out) const;

    // The id of a vocabulary entry given as raw bytes.
    std::optional<std::int32_t> id_of(std::string_view bytes) const;

 private:
    struct Impl;
    explicit BpeModel(std::unique_ptr<Impl> impl);
    void merge_piece(std::string_view bytes, std::vector<std::int32_t>& out) const;
    void push_initial_symbols(std::string_view bytes) const;

    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::tokenizer
