#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace tessera::detail {

void check_failed(const char* file, int line, const std::string& message) {
    std::fprintf(stderr, "%s:%d: %s\n", file, line, message.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace tessera::detail
