#pragma once
// base/status.h — Status and StatusOr<T>: the channel for expected failures (a bad
// model folder, a missing tensor, a bad flag). Bugs use TSR_CHECK (base/check.h).
// Values; safe to copy between threads.

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

enum class StatusCode {
    kOk,
    kInvalidArgument,
    kNotFound,
    kUnimplemented,
    kOutOfRange,
    kDataLoss,
    kResourceExhausted,
    kDeadlineExceeded,
    kInternal,
    kUnavailable,
};

class [[nodiscard]] Status {
 public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status Ok() { return {}; }
    static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
    static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
    static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
    static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
    static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
    static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
    static Status ResourceExhausted(std::string m) {
        return {StatusCode::kResourceExhausted, std::move(m)};
    }

    bool ok() const { return code_ == StatusCode::kOk; }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    std::string to_string() const;

 private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

// StatusOr<T>: either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
    StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
    StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
    bool ok() const { return value_.has_value(); }
    const Status& status() const { return status_; }
    T& value() & { return *value_; }
    const T& value() const& { return *value_; }
    T&& value() && { return std::move(*value_); }
    T* operator->() { return &*value_; }
    const T* operator->() const { return &*value_; }
    T& operator*() & { return *value_; }

 private:
    Status status_;
    std::optional<T> value_;
};

}  // namespace tessera

#define TSR_STATUS_CONCAT_INNER(a, b) a##b
#define TSR_STATUS_CONCAT(a, b) TSR_STATUS_CONCAT_INNER(a, b)

#define TSR_RETURN_IF_ERROR(expr)                      \
    do {                                               \
        ::tessera::Status tsr_status_ = (expr);        \
        if (!tsr_status_.ok()) return tsr_status_;     \
    } while (0)

// TSR_ASSIGN_OR_RETURN(auto x, f()): on error returns the Status from the caller.
#define TSR_ASSIGN_OR_RETURN(lhs, expr) \
    TSR_ASSIGN_OR_RETURN_IMPL(TSR_STATUS_CONCAT(tsr_or_, __LINE__), lhs, expr)
#define TSR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                            \
    if (!tmp.ok()) return tmp.status();           \
    lhs = std::move(tmp).value()
