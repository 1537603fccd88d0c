#include "server/sglang_flags.h"

#include <cstdlib>
#include <sstream>

#include "base/check.h"

namespace tessera::server {

extern const char kSglangFlagsTsv[];  // sglang_flags_table.cpp, generated from sglang_flags.tsv

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    if (s.empty()) return parts;
    std::string part;
    std::istringstream in(s);
    while (std::getline(in, part, sep)) parts.push_back(part);
    if (s.back() == sep) parts.emplace_back();
    return parts;
}

SglangFlag::Kind parse_kind(const std::string& s) {
    if (s == "switch") return SglangFlag::Kind::kSwitch;
    if (s == "optbool") return SglangFlag::Kind::kOptionalSwitch;
    if (s == "list") return SglangFlag::Kind::kList;
    TSR_CHECK(s == "value") << "sglang_flags.tsv: unknown kind " << s;
    return SglangFlag::Kind::kValue;
}

void parse_tessera(const std::string& s, SglangFlag& flag) {
    const auto colon = s.find(':');
    const std::string what = s.substr(0, colon);
    flag.reason = colon == std::string::npos ? "" : s.substr(colon + 1);
    using T = SglangFlag::Tessera;
    if (what == "tessera") flag.tessera = T::kImplemented;
    else if (what == "config") flag.tessera = T::kConfigFile;
    else if (what == "gpu") flag.tessera = T::kGpuOnly;
    else if (what == "ignored") flag.tessera = T::kIgnored;
    else {
        TSR_CHECK(what == "feature") << "sglang_flags.tsv: unknown disposition " << s;
        flag.tessera = T::kNotImplemented;
    }
}

std::vector<SglangFlag> parse_table() {
    std::vector<SglangFlag> flags;
    std::istringstream in(kSglangFlagsTsv);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const std::vector<std::string> cols = split(line, '\t');
        TSR_CHECK(cols.size() == 9) << "sglang_flags.tsv: 9 columns expected: " << line;
        SglangFlag f;
        f.names = split(cols[0], ',');
        f.kind = parse_kind(cols[1]);
        f.type = cols[2];
        f.default_value = cols[3];
        f.choices = split(cols[4], '|');
        f.section = cols[5];
        parse_tessera(cols[6], f);
        f.also_neutral = split(cols[7], '|');
        f.help = cols[8];
        flags.push_back(std::move(f));
    }
    return flags;
}

bool parses_as_number(const std::string& s, double& out) {
    if (s.empty()) return false;
    char* end = nullptr;
    out = std::strtod(s.c_str(), &end);
    return end == s.c_str() + s.size();
}

}  // namespace

std::string SglangFlag::default_text() const {
    const std::string& d = default_value;
    if (d.size() >= 2 && (d.front() == '"' || d.front() == '\'') && d.back() == d.front())
        return d.substr(1, d.size() - 2);
    return d;
}

bool SglangFlag::is_neutral(const std::string& value) const {
    for (const std::string& v : also_neutral)
        if (v == value) return true;
    const std::string d = default_text();
    if (value == d) return true;
    double a = 0, b = 0;
    if (parses_as_number(value, a) && parses_as_number(d, b)) return a == b;
    return false;
}

const std::vector<SglangFlag>& sglang_flags() {
    static const std::vector<SglangFlag> flags = parse_table();
    return flags;
}

}  // namespace tessera::server
