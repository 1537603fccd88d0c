// tokenizer/jinja/pystr.cpp — Python str methods on UTF-8 text (pystr.h).

#include "tokenizer/jinja/pystr.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/value.h"

namespace tessera::jinja {

bool py_isspace(std::string_view ch) {
    if (ch.size() == 1) {
        unsigned char c = static_cast<unsigned char>(ch[0]);
        return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
    }
    // Non-ASCII code points Python counts as whitespace.
    static const std::string_view kSpaces[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001",
                                               "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                               "\u2007", "\u2008", "\u2009", "\u200a", "\u2028",
                                               "\u2029", "\u202f", "\u205f", "\u3000"};
    return std::find(std::begin(kSpaces), std::end(kSpaces), ch) != std::end(kSpaces);
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
    std::vector<std::string> cps = utf8_chars(s);
    std::vector<std::string> set;
    if (chars) set = utf8_chars(*chars);
    auto strip_it = [&](const std::string& c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_isspace(c);
    };
    size_t b = 0, e = cps.size();
    if (left) {
        while (b < e && strip_it(cps[b])) ++b;
    }
    if (right) {
        while (e > b && strip_it(cps[e - 1])) --e;
    }
    std::string out;
    for (size_t i = b; i < e; ++i) out += cps[i];
    return out;
}

static std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit,
                                                 bool from_right) {
    std::vector<std::string> cps = utf8_chars(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    std::vector<std::string> parts;
    size_t i = 0, n = cps.size();
    while (true) {
        while (i < n && py_isspace(cps[i])) ++i;
        if (i == n) break;
        std::string word;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
            // The rest goes unsplit (its trailing whitespace kept), as in Python.
            for (; i < n; ++i) word += cps[i];
            parts.push_back(word);
            break;
        }
        while (i < n && !py_isspace(cps[i])) word += cps[i++];
        parts.push_back(word);
    }
    if (from_right) {
        // Words were built from reversed code points: reverse them back, then their order.
        for (auto& p : parts) {
            std::vector<std::string> c = utf8_chars(p);
            std::reverse(c.begin(), c.end());
            p.clear();
            for (auto& x : c) p += x;
        }
        std::reverse(parts.begin(), parts.end());
    }
    return parts;
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
    if (!sep) return split_whitespace(s, maxsplit, from_right);
    if (sep->empty()) throw_error("empty separator in split()");
    std::vector<std::string> parts;
    if (!from_right) {
        size_t start = 0;
        while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
            size_t p = s.find(*sep, start);
            if (p == std::string_view::npos) break;
            parts.emplace_back(s.substr(start, p - start));
            start = p + sep->size();
        }
        parts.emplace_back(s.substr(start));
        return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t p = s.rfind(*sep, end - sep->size());
        if (p == std::string_view::npos) break;
        parts.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
        end = p;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
}

std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s,
                       int64_t count) {
    std::string out;
    if (old_s.empty()) {
        // Python inserts `new` before every code point and at the end.
        int64_t done = 0;
        for (const std::string& c : utf8_chars(s)) {
            if (count < 0 || done < count) {
                out += new_s;
                ++done;
            }
            out += c;
        }
        if (count < 0 || done < count) out += new_s;
        return out;
    }
    size_t start = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t p = s.find(old_s, start);
        if (p == std::string_view::npos) break;
        out.append(s.substr(start, p - start));
        out.append(new_s);
        start = p + old_s.size();
        ++done;
    }
    out.append(s.substr(start));
    return out;
}

std::string py_upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

std::string py_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string py_capitalize(std::string_view s) {
    std::string out = py_lower(s);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
}

std::string py_title(std::string_view s) {
    std::string out(s);
    bool prev_cased = false;
    for (char& c : out) {
        unsigned char u = static_cast<unsigned char>(c);
        if (std::isalpha(u)) {
            c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
            prev_cased = true;
        } else {
            prev_cased = false;
        }
    }
    return out;
}

std::string jinja_title(std::string_view s) {
    // Jinja splits on runs of [-\s({\[<] and capitalizes each piece.
    auto is_sep = [](char c) {
        return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
               std::isspace(static_cast<unsigned char>(c));
    };
    std::string out;
    bool word_start = true;
    for (char c : s) {
        unsigned char u = static_cast<unsigned char>(c);
        if (is_sep(c)) {
            out += c;
            word_start = true;
        } else {
            out += static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
            word_start = false;
        }
    }
    return out;
}

std::string html_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
    size_t p = from_right ? s.rfind(sub) : s.find(sub);
    if (p == std::string_view::npos) return -1;
    return static_cast<int64_t>(utf8_length(s.substr(0, p)));
}

int64_t py_count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string_view::npos; p = s.find(sub, p + sub.size())) ++n;
    return n;
}

}  // namespace tessera::jinja
