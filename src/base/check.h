#pragma once
// base/check.h — invariant checks for bugs (not for bad input: that is Status).
// A failed check prints file:line, the condition and the values, then aborts.

#include <sstream>
#include <string>

namespace tessera::detail {

[[noreturn]] void check_failed(const char* file, int line, const std::string& message);

// Collects `<<` context after a failed check and aborts when destroyed.
class CheckFailure {
 public:
    CheckFailure(const char* file, int line, std::string head) : file_(file), line_(line) {
        stream_ << head;
    }
    [[noreturn]] ~CheckFailure() { check_failed(file_, line_, stream_.str()); }
    template <typename T>
    CheckFailure& operator<<(const T& v) {
        stream_ << v;
        return *this;
    }

 private:
    const char* file_;
    int line_;
    std::ostringstream stream_;
};

struct Voidify {
    void operator&(const CheckFailure&) {}
};

}  // namespace tessera::detail

#define TSR_CHECK(cond)                       \
    (cond) ? (void)0                          \
           : ::tessera::detail::Voidify() &   \
                 ::tessera::detail::CheckFailure(__FILE__, __LINE__, "check failed: " #cond " ")

#define TSR_CHECK_OP(a, b, op)                                                              \
    ((a)op(b)) ? (void)0                                                                    \
               : ::tessera::detail::Voidify() &                                             \
                     ::tessera::detail::CheckFailure(__FILE__, __LINE__,                    \
                                                     "check failed: " #a " " #op " " #b " ") \
                         << "(" << (a) << " vs " << (b) << ") "

#define TSR_CHECK_EQ(a, b) TSR_CHECK_OP(a, b, ==)
#define TSR_CHECK_LE(a, b) TSR_CHECK_OP(a, b, <=)
#define TSR_CHECK_LT(a, b) TSR_CHECK_OP(a, b, <)
#define TSR_CHECK_GE(a, b) TSR_CHECK_OP(a, b, >=)

#ifdef NDEBUG
#define TSR_DCHECK(cond) (void)0
#else
#define TSR_DCHECK(cond) TSR_CHECK(cond)
#endif
