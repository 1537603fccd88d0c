// tokenizer/normalizer.cpp — see normalizer.h. ICU does the work on UTF-8 directly.

#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "base/check.h"

namespace tessera::tokenizer {
namespace {

const icu::Normalizer2* instance(NormalizationForm form) {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    switch (form) {
        case NormalizationForm::kNfc: n = icu::Normalizer2::getNFCInstance(err); break;
        case NormalizationForm::kNfd: n = icu::Normalizer2::getNFDInstance(err); break;
        case NormalizationForm::kNfkc: n = icu::Normalizer2::getNFKCInstance(err); break;
        case NormalizationForm::kNfkd: n = icu::Normalizer2::getNFKDInstance(err); break;
    }
    TSR_CHECK(U_SUCCESS(err) && n != nullptr)
        << "ICU normalizer data missing: " << u_errorName(err);
    return n;
}

// ASCII text is unchanged by every normalization form and is the common case: skip ICU.
bool is_ascii(std::string_view text) {
    for (const char c : text) {
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    }
    return true;
}

}  // namespace

std::string_view Normalizer::normalize(std::string_view text, std::string& storage) const {
    if (forms_.empty() || is_ascii(text)) return text;
    std::string_view current = text;
    std::string scratch;
    for (const NormalizationForm form : forms_) {
        const icu::Normalizer2* n = instance(form);
        UErrorCode err = U_ZERO_ERROR;
        const icu::StringPiece piece(current.data(), static_cast<int32_t>(current.size()));
        if (n->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) continue;
        err = U_ZERO_ERROR;
        scratch.clear();
        icu::StringByteSink<std::string> sink(&scratch, static_cast<int32_t>(current.size()));
        n->normalizeUTF8(0, piece, sink, nullptr, err);
        TSR_CHECK(U_SUCCESS(err)) << "ICU normalization failed: " << u_errorName(err);
        storage.swap(scratch);
        current = storage;
    }
    return current;
}

}  // namespace tessera::tokenizer
