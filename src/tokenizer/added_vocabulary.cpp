// tokenizer/added_vocabulary.cpp — see added_vocabulary.h.

#include "tokenizer/added_vocabulary.h"

#include <unicode/uchar.h>

#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

// Length of the whitespace (Unicode White_Space, like Rust's char::is_whitespace) run that
// ends at `end` (going left) or starts at `begin` (going right).
std::size_t whitespace_before(std::string_view text, std::size_t end) {
    std::size_t i = end;
    while (i > 0) {
        std::size_t start = i - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + start;
        const Utf8Step s = utf8_step(p, i - start);
        if (s.kind != Utf8Kind::kValid || !u_isUWhiteSpace(static_cast<UChar32>(s.code_point))) {
            break;
        }
        i = start;
    }
    return end - i;
}

std::size_t whitespace_after(std::string_view text, std::size_t begin) {
    std::size_t i = begin;
    while (i < text.size()) {
        const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
        const Utf8Step s = utf8_step(p, text.size() - i);
        if (s.kind != Utf8Kind::kValid || !u_isUWhiteSpace(static_cast<UChar32>(s.code_point))) {
            break;
        }
        i += s.length;
    }
    return i - begin;
}

}  // namespace

AddedVocabulary::AddedVocabulary(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
    nodes_.emplace_back();
    for (std::size_t t = 0; t < tokens_.size(); ++t) {
        const std::string& s = tokens_[t].content;
        if (s.empty()) continue;
        first_byte_[static_cast<unsigned char>(s[0])] = true;
        std::int32_t node = 0;
        for (const char ch : s) {
            const auto b = static_cast<unsigned char>(ch);
            std::int32_t child = -1;
            for (const auto& [byte, index] : nodes_[node].children) {
                if (byte == b) child = index;
            }
            if (child < 0) {
                child = static_cast<std::int32_t>(nodes_.size());
                nodes_[node].children.emplace_back(b, child);
                nodes_.emplace_back();
            }
            node = child;
        }
        if (nodes_[node].token < 0) nodes_[node].token = static_cast<std::int32_t>(t);
    }
}

std::pair<std::int32_t, std::size_t> AddedVocabulary::longest_at(std::string_view text,
                                                                 std::size_t pos) const {
    std::pair<std::int32_t, std::size_t> best{-1, 0};
    std::int32_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
        const auto b = static_cast<unsigned char>(text[i]);
        std::int32_t child = -1;
        for (const auto& [byte, index] : nodes_[node].children) {
            if (byte == b) {
                child = index;
                break;
            }
        }
        if (child < 0) break;
        node = child;
        if (nodes_[node].token >= 0) best = {nodes_[node].token, i + 1 - pos};
    }
    return best;
}

void AddedVocabulary::split(std::string_view text, std::vector<Segment>& segments) const {
    std::size_t text_start = 0;  // start of the pending plain-text segment
    std::size_t pos = 0;
    while (pos < text.size()) {
        if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
            ++pos;
            continue;
        }
        const auto [token, length] = longest_at(text, pos);
        if (token < 0) {
            ++pos;
            continue;
        }
        const AddedToken& t = tokens_[token];
        std::size_t begin = pos;
        std::size_t end = pos + length;
        if (t.lstrip) {
            // Only the pending plain text, never a previous token, can be swallowed.
            const std::string_view before = text.substr(text_start, begin - text_start);
            begin -= whitespace_before(before, before.size());
        }
        if (t.rstrip) end += whitespace_after(text, end);
        if (begin > text_start) segments.push_back({text.substr(text_start, begin - text_start)});
        segments.push_back({text.substr(begin, end - begin), t.id});
        text_start = end;
        pos = end;
    }
    if (text_start < text.size()) segments.push_back({text.substr(text_start)});
}

}  // namespace tessera::tokenizer
