#pragma once
// server/json_limits.h — how deep the JSON the server reads may nest: request bodies, and the
// JSON a model writes in its tool calls.

namespace tessera::server {

// Deepest nesting of arrays / objects (tool schemas nest a few levels; 10^5 levels would
// overflow the stack of any recursive walk of the value).
constexpr int kMaxJsonDepth = 128;

}  // namespace tessera::server
