#pragma once
// base/process_memory.h — this process's resident memory as the kernel counts it
// (/proc/self/status): what `generate` reports and /metrics exposes next to the weights and
// the KV in use. Thread-safe (reads a file).

#include <cstdint>

namespace tessera {

struct ProcessMemory {
    std::int64_t resident_bytes = 0;       // VmRSS
    std::int64_t peak_resident_bytes = 0;  // VmHWM: the most it has been resident since start
};

// Zeros where /proc is not readable.
ProcessMemory process_memory();

// The memory this host gives its processes: physical memory, or the cgroup (v2) limit when
// that is lower. A rank's share of it is its "device memory" in SGLang's formulas.
std::int64_t host_memory_bytes();

}  // namespace tessera
