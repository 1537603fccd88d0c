#include "base/process_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace tessera {

ProcessMemory process_memory() {
    ProcessMemory m;
    std::ifstream status("/proc/self/status");
    std::string line;
    const auto kib = [&line](std::size_t prefix) {
        try {
            return std::stoll(line.substr(prefix)) * 1024;
        } catch (const std::exception&) {
            return 0LL;
        }
    };
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) m.resident_bytes = kib(6);
        if (line.rfind("VmHWM:", 0) == 0) m.peak_resident_bytes = kib(6);
    }
    return m;
}

std::int64_t host_memory_bytes() {
    std::int64_t total = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    std::ifstream cgroup("/sys/fs/cgroup/memory.max");
    std::string limit;
    if (cgroup >> limit && limit != "max") {
        try {
            total = std::min<std::int64_t>(total, std::stoll(limit));
        } catch (const std::exception&) {
        }
    }
    return total;
}

}  // namespace tessera
