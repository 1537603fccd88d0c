#include "base/process_memory.h"

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

}  // namespace tessera
