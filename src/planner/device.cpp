#include "planner/device.h"

#include "base/thread_pool.h"
#include "kernels/isa.h"

namespace tessera::planner {

namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;

DeviceSpec gpu(std::string name, double memory_gb, double bandwidth_tbs, double bf16_tflops, double nvlink_gbs,
               double nic_gbits, std::string source) {
    DeviceSpec d;
    d.name = std::move(name);
    d.memory_bytes = static_cast<std::int64_t>(memory_gb * kGB);
    d.devices_per_node = 8;
    d.memory_bandwidth = bandwidth_tbs * 1e12;
    d.flops = bf16_tflops * kTFLOPS;
    d.intra_node_bandwidth = nvlink_gbs / 2 * kGB;  // vendors quote both directions
    d.inter_node_bandwidth = nic_gbits / 8 * kGB;   // one NIC per GPU
    d.collective_latency_s = 10e-6;
    d.source = std::move(source);
    return d;
}

std::vector<DeviceSpec> presets() {
    DeviceSpec cpu;
    cpu.name = "cpu";
    cpu.devices_per_node = 1;
    cpu.shared_by_node_ranks = true;
    cpu.cores = default_thread_count();
    // Two cores streaming bf16 weights: the middle of what this class of host measures
    // (35-60 GB/s); bench/plan_calibration.py measures this host's.
    cpu.memory_bandwidth = 45 * kGB;
    // One thread streams about 0.7 of what two do (bench/plan_calibration.py measures it).
    cpu.core_bandwidth = 0.7 * cpu.memory_bandwidth;
    if (kernels::active_isa() == kernels::Isa::kAmx) {
        // Per core: one AMX tile multiply (16 x 16 outputs x 32 products x mul-add) per 16
        // cycles, 1024 FLOP per cycle, x 2.5 GHz. A 512-token prefill runs at 0.15 of that end
        // to end (the tile GEMM at a quarter, attention and the rest slower; docs/speed.md).
        cpu.flops = cpu.cores * 1024 * 2.5e9;
        cpu.flops_efficiency = 0.15;
    } else {
        // Per core: 2 AVX-512 BF16 dot-product units x 64 FLOP (16 lanes x 2 pairs x mul-add) x 2.5 GHz.
        cpu.flops = cpu.cores * 2 * 64 * 2.5e9;
    }
    cpu.intra_node_bandwidth = 10 * kGB;  // shared-memory collectives
    cpu.inter_node_bandwidth = 1.25 * kGB;  // 10 GbE
    cpu.collective_latency_s = 20e-6;
    cpu.source = "this host: memory from the OS (or its cgroup limit), shared by its ranks as tessera serve does";
    return {
        cpu,
        gpu("h20", 96, 4.0, 148, 900, 400, "NVIDIA H20: 96 GB HBM3, 4.0 TB/s, 148 TFLOPS bf16 dense, NVLink 900 GB/s"),
        gpu("h800", 80, 3.35, 989, 400, 400, "NVIDIA H800 SXM: 80 GB, 3.35 TB/s, 989 TFLOPS bf16 dense, NVLink 400 GB/s"),
        gpu("h100", 80, 3.35, 989, 900, 400, "NVIDIA H100 SXM: 80 GB, 3.35 TB/s, 989 TFLOPS bf16 dense, NVLink 900 GB/s"),
        gpu("a100", 80, 2.039, 312, 600, 200, "NVIDIA A100 SXM 80 GB: 2.0 TB/s, 312 TFLOPS bf16 dense, NVLink 600 GB/s"),
    };
}

}  // namespace

std::vector<std::string> device_preset_names() {
    std::vector<std::string> names;
    for (const DeviceSpec& d : presets()) names.push_back(d.name);
    return names;
}

StatusOr<DeviceSpec> device_preset(const std::string& name) {
    std::string known;
    for (const DeviceSpec& d : presets()) {
        if (d.name == name) return d;
        known += (known.empty() ? "" : ", ") + d.name;
    }
    return Status::InvalidArgument("--device-preset " + name + " is not known; use one of " + known +
                                   " (or override its figures with --device-memory-gb and the other --device-* flags)");
}

}  // namespace tessera::planner
