#pragma once
// server/named_formats.h — looking up a parser format by the name a flag gives
// (--reasoning-parser, --tool-call-parser): the entry, or one line naming the flag, the value
// and the names tessera has.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::server {

template <typename Format, std::size_t N>
StatusOr<Format> find_named_format(const std::array<Format, N>& formats, std::string_view flag, std::string_view name) {
    for (const Format& f : formats)
        if (f.name == name) return f;
    std::string names;
    for (const Format& f : formats) names += (names.empty() ? "" : ", ") + f.name;
    return Status::InvalidArgument(std::string(flag) + " " + std::string(name) + ": tessera parses " + names +
                                   " (SGLang's other parsers are not implemented)");
}

}  // namespace tessera::server
