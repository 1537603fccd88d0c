// base/json_text.cpp — see json_text.h.

#include "base/json_text.h"

#include <string>

namespace tessera {

StatusOr<nlohmann::ordered_json> parse_json_text(std::string_view text, int max_depth, std::string_view what) {
    using Json = nlohmann::ordered_json;
    // Deeper values are discarded as they are read, so the document never exists whole.
    bool too_deep = false;
    const Json::parser_callback_t bound_depth = [&](int depth, Json::parse_event_t, Json&) {
        if (depth > max_depth) too_deep = true;
        return !too_deep;
    };
    Json parsed;
    try {
        parsed = Json::parse(text, bound_depth);
    } catch (const Json::exception& e) {
        if (!too_deep) return Status::InvalidArgument(std::string(what) + " is not valid JSON: " + e.what());
    }
    if (too_deep)
        return Status::InvalidArgument(std::string(what) + " nests deeper than " + std::to_string(max_depth) +
                                       " levels");
    return parsed;
}

}  // namespace tessera
