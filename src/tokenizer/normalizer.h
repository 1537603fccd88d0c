#pragma once
// tokenizer/normalizer.h — the tokenizer.json "normalizer" step: Unicode normalization forms
// (Qwen uses NFC; Llama 3 has none), applied in order when the file has a Sequence.
// Immutable after construction; thread-safe.

#include <string>
#include <string_view>
#include <vector>

namespace tessera::tokenizer {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

class Normalizer {
 public:
    Normalizer() = default;  // identity
    explicit Normalizer(std::vector<NormalizationForm> forms) : forms_(std::move(forms)) {}

    bool is_identity() const { return forms_.empty(); }

    // Normalized `text` (valid UTF-8): either `text` itself when nothing changes, or a view
    // of `storage`, which it overwrites.
    std::string_view normalize(std::string_view text, std::string& storage) const;

 private:
    std::vector<NormalizationForm> forms_;
};

}  // namespace tessera::tokenizer
