#pragma once
// bench/machine_peaks.h — what this machine can do at best, measured: memory bandwidth
// (STREAM-like triad and read-only sum) and the register-resident multiply-add peak, so that
// benchmarks can report their results as a fraction of it.
// Each call takes from tens of milliseconds (peaks) to a few seconds (bandwidth: it touches
// ~768 MB). Thread-safety: do not run two at once (they would measure each other).

namespace tessera {
class ThreadPool;
}

namespace tessera::bench {

// Triad a[i] = b[i] + s * c[i] over three f64 arrays far larger than L3 (256 MB each), split
// over `pool` (nullptr: the calling thread). Counts 24 bytes per element (two reads, one
// write; the write-allocate read is not counted, as in STREAM). Best of several runs, GB/s.
double measure_triad_bandwidth_gbs(ThreadPool* pool);

// Read-only sum over a 512 MB array, split over `pool`. Best of several repetitions, GB/s.
double measure_read_bandwidth_gbs(ThreadPool* pool);

// The bf16 multiply-add peak of the path the kernels take (kernels::active_isa()) on every
// thread of `pool`: the AMX peak below on Isa::kAmx, else the _mm512_dpbf16_ps one.
double measure_peak_bf16_gflops(ThreadPool* pool);

// Peak GFLOP/s of independent _mm512_dpbf16_ps chains (64 FLOP per instruction: 16 lanes ×
// 2 products × multiply and add). Falls back to the AVX2 FMA peak when the CPU lacks AVX-512
// BF16.
double measure_peak_dpbf16_gflops(ThreadPool* pool);

// Peak GFLOP/s of four independent AMX tile multiply chains (32768 FLOP each); 0 when the
// CPU or the OS gives no AMX.
double measure_peak_amx_bf16_gflops(ThreadPool* pool);

// GFLOP/s of the loop a tiled GEMM runs, 2 row tiles × 2 panels of accumulators with the two
// input and two weight tiles loaded from L1 for every K step (four loads per four multiplies),
// on operands that stay in L1: what a GEMM that streams K can reach at best, whatever its
// blocking; 0 without AMX.
double measure_amx_l1_tile_loop_gflops(ThreadPool* pool);

// Peak GFLOP/s of independent f32 FMA chains (_mm512_fmadd_ps when the CPU has AVX-512 BF16
// support, i.e. our AVX-512 path, else 256-bit FMA), 2 FLOP per lane.
double measure_peak_f32_gflops(ThreadPool* pool);

}  // namespace tessera::bench
