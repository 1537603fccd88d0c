#include "base/status.h"

namespace tessera {

namespace {
const char* code_name(StatusCode code) {
    switch (code) {
        case StatusCode::kOk: return "OK";
        case StatusCode::kInvalidArgument: return "invalid argument";
        case StatusCode::kNotFound: return "not found";
        case StatusCode::kUnimplemented: return "unimplemented";
        case StatusCode::kOutOfRange: return "out of range";
        case StatusCode::kDataLoss: return "data loss";
        case StatusCode::kResourceExhausted: return "resource exhausted";
        case StatusCode::kDeadlineExceeded: return "deadline exceeded";
        case StatusCode::kInternal: return "internal";
        case StatusCode::kUnavailable: return "unavailable";
    }
    return "unknown";
}
}  // namespace

std::string Status::to_string() const {
    if (ok()) return "OK";
    return std::string(code_name(code_)) + ": " + message_;
}

}  // namespace tessera
