// grammar/json_text.cpp — see json_text.h.

#include "grammar/json_text.h"

#include <exception>

namespace tessera::grammar {

StatusOr<nlohmann::ordered_json> parse_constraint_json(std::string_view text, std::string_view what) {
    // Deeper values are discarded as they are read, so the document never exists whole.
    bool too_deep = false;
    using Json = nlohmann::ordered_json;
    const Json::parser_callback_t bound_depth = [&](int depth, Json::parse_event_t, Json&) {
        if (depth > kMaxConstraintJsonDepth) too_deep = true;
        return !too_deep;
    };
    Json parsed;  // in the text's key order: a schema's properties keep theirs
    try {
        parsed = Json::parse(text, bound_depth);
    } catch (const std::exception& e) {
        if (!too_deep) return Status::InvalidArgument(std::string(what) + " is not valid JSON: " + e.what());
    }
    if (too_deep)
        return Status::InvalidArgument(std::string(what) + " nests deeper than " +
                                       std::to_string(kMaxConstraintJsonDepth) + " levels");
    return parsed;
}

}  // namespace tessera::grammar
