// kernels/matmul.cpp — weight packing, the scalar reference paths, and the matmul dispatch:
// picks the ISA path, prepares x for it (bf16 rounding) and splits the output over the
// thread pool. The vector kernels live in cpu/matmul_avx2.cpp and cpu/matmul_avx512.cpp.

#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/batch_invariance.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/ops.h"

namespace tessera::kernels {

namespace {

using cpu::kPanelWidth;
using cpu::packed_panel_bytes;

// Below this many elements of x, converting it on the calling thread is cheaper than a
// second round trip through the pool.
constexpr std::int64_t kParallelPrepareElements = 1 << 16;
// Rows from which a computed input (matmul_silu_and_mul, matmul_rms_norm) is prepared on the
// workers, as silu_and_mul and rms_norm split theirs.
constexpr std::int64_t kParallelActivationRows = 8;
// Rows per work item when the output is split by rows: a multiple of both ISA row tiles.
constexpr std::int64_t kRowAlign = 12;
// Rows per pass over the weight for tall inputs (see matmul()).
constexpr std::int64_t kRowBlock = 512;

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }

// Chunks per worker when splitting work: enough that a worker slowed down by another
// process on its core (common on a shared machine) hands its share to the others.
constexpr std::int64_t kChunksPerWorker = 6;

// Runs fn(begin, end) over [0, n) in chunks that are multiples of `align` (except the
// last), handed out to the pool's workers on demand; inline when there is no pool.
template <typename F>
void split(ThreadPool* pool, std::int64_t n, std::int64_t align, F&& fn) {
    if (pool == nullptr || pool->size() == 1 || n <= align) {
        fn(std::int64_t{0}, n);
        return;
    }
    const std::int64_t units = (n + align - 1) / align;
    const std::int64_t n_chunks = std::min(units, kChunksPerWorker * pool->size());
    const std::int64_t chunk = (units + n_chunks - 1) / n_chunks * align;
    std::atomic<std::int64_t> next{0};
    pool->run([&](int, int) {
        while (true) {
            const std::int64_t begin = next.fetch_add(1, std::memory_order_relaxed) * chunk;
            if (begin >= n) return;
            fn(begin, std::min(n, begin + chunk));
        }
    });
}

// Scratch for x converted for a bf16 kernel; grows, never shrinks. Per calling thread, so
// concurrent matmul() calls from different threads do not share it. At least
// kMinScratchBytes, so that decode-sized inputs (16 rows of 32K columns) never grow it: a
// thread running whole MoE experts meets their row counts in no set order. Slot 1 holds a
// gated MLP's activation while slot 0 still holds its input.
constexpr std::size_t kMinScratchBytes = std::size_t{1} << 20;

template <typename T, int kSlot = 0>
T* scratch(std::int64_t elements) {
    thread_local AlignedBuffer buffer;
    const auto bytes = static_cast<std::size_t>(elements) * sizeof(T);
    if (buffer.size() < bytes) buffer = AlignedBuffer(std::max(bytes, kMinScratchBytes));
    return buffer.as<T>();
}

float fp8_scale_at(const PackedWeight& w, std::int64_t row, std::int64_t col) {
    const std::int64_t panel = row / kPanelWidth;
    return w.scales.as<float>()[(panel * w.scale_blocks() + col / w.scale_block) * kPanelWidth + row % kPanelWidth];
}

float packed_at(const PackedWeight& w, std::int64_t row, std::int64_t col) {
    const std::int64_t panel = row / kPanelWidth;
    const std::int64_t lane = row % kPanelWidth;
    if (is_fp8(w.dtype)) {
        const std::uint8_t code = w.data.as<std::uint8_t>()[panel * packed_panel_bytes(w) + cpu::fp8_panel_offset(lane, col)];
        return fp8_to_f32(code, w.dtype) * fp8_scale_at(w, row, col);
    }
    if (w.dtype == DType::kBF16) {
        const std::int64_t index =
            ((panel * (w.k_padded / 2) + col / 2) * kPanelWidth + lane) * 2 + col % 2;
        return bf16_to_f32(w.data.as<std::uint16_t>()[index]);
    }
    return w.data.as<float>()[(panel * w.k_padded + col) * kPanelWidth + lane];
}

// The kReference path: scalar loops over the packed layout, rows [r0, r1) × panels
// [p0, p1). Each output sums over k in order, in f32.
void matmul_packed_reference(const float* x, std::int64_t x_stride, const PackedWeight& w, float* y,
                             std::int64_t y_stride, std::int64_t r0, std::int64_t r1,
                             std::int64_t p0, std::int64_t p1) {
    const bool bf16 = w.dtype != DType::kF32;
    std::vector<float> xr(static_cast<std::size_t>(w.k));
    for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = 0; c < w.k; ++c) {
            const float v = x[r * x_stride + c];
            xr[c] = bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
        }
        const std::int64_t n_end = std::min(w.n, p1 * kPanelWidth);
        for (std::int64_t j = p0 * kPanelWidth; j < n_end; ++j) {
            float acc = 0.0f;
            for (std::int64_t c = 0; c < w.k; ++c) acc += xr[c] * packed_at(w, j, c);
            y[r * y_stride + j] = acc;
        }
    }
}

// Steps of K dequantized at a time for the tall-input fp8 path: 4 panels × 512 steps of
// bf16 (128 KB) stay in L2 while every row of the input runs over them, as the bf16 kernel's
// K blocks do (with 256 steps, and without fetching the next chunk's codes during the GEMM,
// cold 512-row GEMMs took 1.08-1.16x bf16's time; now 0.9-1.1x).
constexpr std::int64_t kFp8ChunkSteps = 512;
// On AMX tiles the chunk spans K up to this many steps (4 panels: 512 KB): every chunk stores
// and reloads the output tiles, which costs more than the tile products of a short chunk
// (512 rows of a 3072 x 1024 weight: 1.45x bf16's time in 256-step chunks, 1.0-1.1x in one).
constexpr std::int64_t kFp8AmxChunkSteps = 2048;

// bf16 on AMX tiles: each worker takes whole panel pairs over all rows (the weight is read
// once), unless there are too few panels to share out; then row blocks of two tiles.
void matmul_amx(const cpu::MatmulOperands& op, std::int64_t n_panels, ThreadPool* pool) {
    constexpr std::int64_t kAmxRowAlign = 32;
    const int n_workers = pool == nullptr ? 1 : pool->size();
    if (n_panels >= 4 * cpu::kAmxPanelGroup * n_workers || op.m < 2 * kAmxRowAlign * n_workers) {
        split(pool, n_panels, cpu::kAmxPanelGroup, [&](std::int64_t p0, std::int64_t p1) {
            cpu::matmul_tile_amx(op, cpu::OutputTile{0, op.m, p0, p1});
        });
    } else {
        split(pool, op.m, kAmxRowAlign, [&](std::int64_t r0, std::int64_t r1) {
            cpu::matmul_tile_amx(op, cpu::OutputTile{r0, r1, 0, n_panels});
        });
    }
}

// FP8 weights (x already prepared as for bf16 in op.a): decode-sized inputs widen the codes
// in registers; taller ones (or the AVX2 path) dequantize a chunk of panels to bf16 per
// thread and run the bf16 kernel (on AMX tiles with Isa::kAmx) over it. Threads split the
// panels, as for bf16 weights.
void matmul_fp8(const cpu::MatmulOperands& op, bool avx512, bool amx, std::int64_t group, ThreadPool* pool) {
    const PackedWeight& w = *op.w;
    cpu::Fp8Panels panels;
    panels.codes = w.data.as<std::uint8_t>();
    panels.scales = w.scales.as<float>();
    panels.panel_bytes = packed_panel_bytes(w);
    panels.scale_block = w.scale_block;
    panels.scale_blocks = w.scale_blocks();
    panels.steps = w.k_padded / 2;
    panels.lookup = &cpu::fp8_lookup(w.dtype);
    const std::int64_t n_panels = w.n_padded / kPanelWidth;
    const bool vbmi = avx512 && cpu_features().avx512_vbmi;
    // Batch-invariant: one path for every height (the two round differently: the chunks hold
    // the scaled weights in bf16).
    if (vbmi && (op.m <= cpu::kFp8DirectRows || batch_invariant())) {
        split(pool, n_panels, group, [&](std::int64_t p0, std::int64_t p1) {
            cpu::matmul_tile_fp8_avx512(op, panels, cpu::OutputTile{0, op.m, p0, p1});
        });
        return;
    }
    const std::int64_t chunk_steps = amx ? kFp8AmxChunkSteps : kFp8ChunkSteps;
    split(pool, n_panels, group, [&](std::int64_t p0, std::int64_t p1) {
        thread_local AlignedBuffer chunk;
        const auto chunk_bytes = static_cast<std::size_t>(group * chunk_steps * 2 * kPanelWidth) * 2;
        if (chunk.size() < chunk_bytes) chunk = AlignedBuffer(chunk_bytes);
        auto* bf16 = chunk.as<std::uint16_t>();
        for (std::int64_t g0 = p0; g0 < p1; g0 += group) {
            const std::int64_t count = std::min(group, p1 - g0);
            for (std::int64_t s0 = 0; s0 < panels.steps; s0 += chunk_steps) {
                const std::int64_t steps = std::min(chunk_steps, panels.steps - s0);
                const std::int64_t chunk_panel_bytes = steps * 2 * kPanelWidth * 2;
                float* y = op.y + g0 * kPanelWidth;
                const std::int64_t n_valid = w.n - g0 * kPanelWidth;
                if (avx512) {
                    if (vbmi) {
                        cpu::dequantize_fp8_panels_avx512(panels, g0, count, s0, steps, bf16);
                    } else {
                        cpu::dequantize_fp8_panels(panels, g0, count, s0, steps, bf16);
                    }
                    const auto* a = static_cast<const std::uint16_t*>(op.a) + 2 * s0;
                    if (amx) {
                        cpu::gemm_bf16_panels_amx(a, op.a_stride, op.m, bf16, chunk_panel_bytes, count, steps, y,
                                                  op.y_stride, n_valid, s0 > 0);
                    } else {
                        // The codes of the next chunk come from memory while this one is multiplied
                        // (in isolation, cold: 8-16 % slower than bf16 without it).
                        const std::int64_t next_s0 = s0 + chunk_steps < panels.steps ? s0 + chunk_steps : 0;
                        const std::int64_t next_g0 = next_s0 > 0 ? g0 : g0 + group;
                        const std::int64_t next_steps = std::min(chunk_steps, panels.steps - next_s0);
                        cpu::PanelPrefetch next;
                        if (next_g0 < p1) {
                            next = {.first = reinterpret_cast<const std::byte*>(panels.codes + next_g0 * panels.panel_bytes +
                                                                                32 * next_s0),
                                    .panel_bytes = panels.panel_bytes,
                                    .lines = (32 * next_steps + 63) / 64};
                        }
                        cpu::gemm_bf16_panels_prefetching_avx512(a, op.a_stride, op.m, bf16, chunk_panel_bytes, count,
                                                                 steps, y, op.y_stride, n_valid, s0 > 0, next);
                    }
                } else {
                    cpu::dequantize_fp8_panels(panels, g0, count, s0, steps, bf16);
                    cpu::gemm_bf16_panels_avx2(static_cast<const float*>(op.a) + 2 * s0, op.a_stride, op.m, bf16,
                                               chunk_panel_bytes, count, steps, y, op.y_stride, n_valid, s0 > 0);
                }
            }
        }
    });
}

// The fields and zeroed storage of an [n, k] weight of `type`, K padded to `k_multiple`.
// Columns are padded to pairs (bf16 / f32) or quads (fp8): the kernels' inner step.
std::int64_t k_multiple_of(DType type) { return is_fp8(type) ? 4 : 2; }

PackedWeight empty_packed(DType type, std::int64_t n, std::int64_t k) {
    PackedWeight out;
    out.dtype = type;
    out.n = n;
    out.k = k;
    out.n_padded = round_up(n, kPanelWidth);
    out.k_padded = round_up(k, k_multiple_of(type));
    out.data = AlignedBuffer(static_cast<std::size_t>(out.n_padded * out.k_padded) * dtype_size(type));
    return out;
}

}  // namespace

std::int64_t packed_weight_bytes(DType type, std::int64_t n, std::int64_t k, std::int64_t scale_block) {
    const std::int64_t n_padded = round_up(n, kPanelWidth);
    std::int64_t bytes = n_padded * round_up(k, k_multiple_of(type)) * static_cast<std::int64_t>(dtype_size(type));
    if (is_fp8(type)) bytes += n_padded * ((k + scale_block - 1) / scale_block) * static_cast<std::int64_t>(sizeof(float));
    return bytes;
}

PackedWeight empty_packed_weight(DType dst_type, std::int64_t n, std::int64_t k) {
    TSR_CHECK(dst_type == DType::kF32 || dst_type == DType::kBF16)
        << "pack_weight: the compute type must be f32 or bf16, got " << dtype_name(dst_type);
    TSR_CHECK(n >= 0 && k >= 0) << "pack_weight: bad shape [" << n << ", " << k << "]";
    return empty_packed(dst_type, n, k);
}

void pack_weight_rows(const void* rows_src, DType src_type, std::int64_t row_begin, std::int64_t rows,
                      PackedWeight& out) {
    TSR_CHECK(row_begin >= 0 && rows >= 0 && row_begin + rows <= out.n)
        << "pack_weight_rows: rows [" << row_begin << ", " << row_begin + rows << ") of " << out.n;
    const std::int64_t k = out.k;
    const auto* src = static_cast<const std::byte*>(rows_src);
    const std::size_t src_row_bytes = static_cast<std::size_t>(k) * dtype_size(src_type);
    std::vector<float> row(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < rows && k > 0; ++i) {
        const std::int64_t j = row_begin + i;
        convert_to_f32(src + i * src_row_bytes, src_type, row.data(), row.size());
        const std::int64_t panel = j / kPanelWidth;
        const std::int64_t lane = j % kPanelWidth;
        if (out.dtype == DType::kBF16) {
            // [panel][k / 2][lane][k % 2]
            std::uint16_t* base =
                out.data.as<std::uint16_t>() + panel * out.k_padded * kPanelWidth + lane * 2;
            for (std::int64_t c = 0; c < k; ++c) {
                base[(c / 2) * kPanelWidth * 2 + c % 2] = f32_to_bf16(row[c]);
            }
        } else {
            // [panel][k][lane]
            float* base = out.data.as<float>() + panel * out.k_padded * kPanelWidth + lane;
            for (std::int64_t c = 0; c < k; ++c) base[c * kPanelWidth] = row[c];
        }
    }
}

PackedWeight pack_weight(const void* w, DType src_type, std::int64_t n, std::int64_t k,
                         DType dst_type) {
    PackedWeight out = empty_packed_weight(dst_type, n, k);
    pack_weight_rows(w, src_type, 0, n, out);
    return out;
}

PackedWeight pack_fp8_weight(const std::uint8_t* codes, DType type, std::int64_t n, std::int64_t k,
                             const float* row_scales, std::int64_t scale_block) {
    TSR_CHECK(scale_block > 0 && scale_block % 4 == 0) << "pack_fp8_weight: scale block " << scale_block
                                                        << " is not a positive multiple of 4";
    TSR_CHECK(is_fp8(type)) << "pack_fp8_weight: " << dtype_name(type) << " is not an fp8 type";
    TSR_CHECK(n >= 0 && k >= 0) << "pack_fp8_weight: bad shape [" << n << ", " << k << "]";
    PackedWeight out = empty_packed(type, n, k);
    out.scale_block = scale_block;
    const std::int64_t blocks = out.scale_blocks();
    out.scales = AlignedBuffer(static_cast<std::size_t>(out.n_padded * blocks) * sizeof(float));
    auto* data = out.data.as<std::uint8_t>();
    auto* scales = out.scales.as<float>();
    const std::int64_t panel_bytes = packed_panel_bytes(out);
    for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t panel = j / kPanelWidth;
        const std::int64_t lane = j % kPanelWidth;
        std::uint8_t* base = data + panel * panel_bytes;
        for (std::int64_t c = 0; c < k; ++c) base[cpu::fp8_panel_offset(lane, c)] = codes[j * k + c];
        for (std::int64_t b = 0; b < blocks; ++b)
            scales[(panel * blocks + b) * kPanelWidth + lane] = row_scales[j * blocks + b];
    }
    return out;
}

namespace cpu {

const Fp8Lookup& fp8_lookup(DType type) {
    static const auto build = [](DType t) {
        Fp8Lookup l{};
        for (int code = 0; code < 128; ++code) {
            const std::uint16_t bits = f32_to_bf16(fp8_to_f32(static_cast<std::uint8_t>(code), t));
            l.low[code] = static_cast<std::uint8_t>(bits & 0xff);
            l.high[code] = static_cast<std::uint8_t>(bits >> 8);
        }
        return l;
    };
    static const Fp8Lookup e4m3 = build(DType::kF8E4M3);
    static const Fp8Lookup e5m2 = build(DType::kF8E5M2);
    return type == DType::kF8E5M2 ? e5m2 : e4m3;
}

void dequantize_fp8_panels(const Fp8Panels& w, std::int64_t panel_begin, std::int64_t n_panels,
                           std::int64_t step_begin, std::int64_t steps, std::uint16_t* dst) {
    for (std::int64_t p = 0; p < n_panels; ++p) {
        const std::uint8_t* codes = w.codes + (panel_begin + p) * w.panel_bytes;
        const float* scales = w.scales + (panel_begin + p) * w.scale_blocks * kPanelWidth;
        std::uint16_t* out = dst + p * steps * 2 * kPanelWidth;
        for (std::int64_t s = step_begin; s < step_begin + steps; ++s) {
            for (std::int64_t lane = 0; lane < kPanelWidth; ++lane) {
                for (std::int64_t e = 0; e < 2; ++e) {
                    const std::int64_t c = 2 * s + e;
                    const std::uint8_t code = codes[fp8_panel_offset(lane, c)];
                    const std::uint16_t magnitude = static_cast<std::uint16_t>(w.lookup->high[code & 0x7f] << 8 |
                                                                               w.lookup->low[code & 0x7f]);
                    const float value = bf16_to_f32(static_cast<std::uint16_t>(magnitude | (code & 0x80) << 8));
                    const float scale = scales[(c / w.scale_block) * kPanelWidth + lane];
                    out[((s - step_begin) * kPanelWidth + lane) * 2 + e] = f32_to_bf16(value * scale);
                }
            }
        }
    }
}

}  // namespace cpu

void unpack_weight(const PackedWeight& w, float* out) {
    for (std::int64_t j = 0; j < w.n; ++j) {
        for (std::int64_t c = 0; c < w.k; ++c) out[j * w.k + c] = packed_at(w, j, c);
    }
}

namespace {

// The rows matmul reads: x itself, silu_and_mul of [gate | up] rows (matmul_silu_and_mul), or
// rms_norm of x (matmul_rms_norm).
struct InputRows {
    enum Kind { kPlain, kSiluAndMul, kRmsNorm } kind = kPlain;
    const float* norm_weight = nullptr;
    float eps = 0.0f;
};

// Columns [c, c + len) of input row `row` (x_stride floats apart) as `input` makes them, into
// out: the activation, or the normed row given its factor `inv` (rms_inverse).
void input_piece(const float* x, std::int64_t x_stride, std::int64_t k, std::int64_t row, const InputRows& input,
                 float inv, std::int64_t c, std::int64_t len, float* out) {
    const float* src = x + row * x_stride;
    if (input.kind == InputRows::kSiluAndMul) {
        silu_and_mul_row(src + c, src + k + c, out, len);
    } else {
        for (std::int64_t j = 0; j < len; ++j) out[j] = src[c + j] * inv * input.norm_weight[c + j];
    }
}

float row_factor(const float* x, std::int64_t x_stride, std::int64_t k, std::int64_t row, const InputRows& input) {
    return input.kind == InputRows::kRmsNorm ? rms_inverse(x + row * x_stride, k, input.eps) : 1.0f;
}

// The input rows as `input` makes them, for the kernels that read f32 rows as they are; per
// calling thread, apart from scratch<float>, which the AVX2 path prepares into, and as large
// at least.
float* computed_rows(const float* x, std::int64_t x_stride, std::int64_t m, std::int64_t k, const InputRows& input,
                     ThreadPool* pool) {
    thread_local AlignedBuffer buffer;
    const auto bytes = static_cast<std::size_t>(m * k) * sizeof(float);
    if (buffer.size() < bytes) buffer = AlignedBuffer(std::max(bytes, kMinScratchBytes));
    float* out = buffer.as<float>();
    // A decode step's few rows stay on the caller, as in the AVX-512 preparation.
    split(m >= kParallelActivationRows ? pool : nullptr, m, 1, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r)
            input_piece(x, x_stride, k, r, input, row_factor(x, x_stride, k, r, input), 0, k, out + r * k);
    });
    return out;
}

// Row stride of a bf16 operand of k_padded columns for AMX tiles: a tile reads one 64-byte
// line of 16 rows, and rows an odd number of lines apart fall in different L1 sets (2 KB
// apart, the 16 rows would share two sets).
std::int64_t amx_row_stride(std::int64_t k_padded) { return ((k_padded + 31) / 32 | 1) * 32; }

// x's rows as the bf16 kernels read them, rounded to bf16 with a zero pad column (see
// matmul_impl.h) and made by `input` on the way, in the calling thread's scratch; *a_stride is
// set to their row stride.
const void* prepare_input(const float* x, std::int64_t x_stride, std::int64_t m, const PackedWeight& w,
                          const InputRows& input, bool avx512, bool amx, ThreadPool* pool, std::int64_t* a_stride) {
    const std::int64_t stride = amx ? amx_row_stride(w.k_padded) : w.k_padded;
    *a_stride = stride;
    void* dst = avx512 ? static_cast<void*>(scratch<std::uint16_t>(m * stride))
                       : static_cast<void*>(scratch<float>(m * stride));
    const auto prepare = [&](std::int64_t r0, std::int64_t r1) {
        if (input.kind != InputRows::kPlain) {
            // The rows in pieces on the stack, each rounded while still in L1.
            constexpr std::int64_t kPiece = 1024;  // even: bf16 pairs stay whole
            alignas(64) float piece[kPiece];
            auto* out = static_cast<std::uint16_t*>(dst);
            for (std::int64_t r = r0; r < r1; ++r) {
                const float inv = row_factor(x, x_stride, w.k, r, input);
                for (std::int64_t c = 0; c < w.k; c += kPiece) {
                    const std::int64_t len = std::min(kPiece, w.k - c);
                    input_piece(x, x_stride, w.k, r, input, inv, c, len, piece);
                    const std::int64_t padded = c + kPiece < w.k ? len : w.k_padded - c;
                    cpu::prepare_bf16_avx512(piece, len, len, padded, 0, 1, out + r * stride + c, stride);
                }
            }
        } else if (avx512) {
            cpu::prepare_bf16_avx512(x, x_stride, w.k, w.k_padded, r0, r1,
                                     static_cast<std::uint16_t*>(dst), stride);
        } else {
            cpu::prepare_bf16_avx2(x, x_stride, w.k, w.k_padded, r0, r1,
                                   static_cast<float*>(dst));
        }
    };
    // The activation's exponentials and the norm's sums cost more than the rounding: rows
    // split as silu_and_mul and rms_norm split them.
    const bool parallel =
        input.kind != InputRows::kPlain ? m >= kParallelActivationRows : m * w.k >= kParallelPrepareElements;
    if (parallel) {
        split(pool, m, 1, prepare);
    } else {
        prepare(0, m);
    }
    return dst;
}

// The ISA a call asks for, or the best this CPU has when it lacks it (the reference path is
// always there).
Isa usable_isa(Isa isa) { return isa != Isa::kReference && !isa_supported(isa) ? best_supported_isa() : isa; }

void matmul_rows(const float* x, std::int64_t m, const PackedWeight& w, float* y, ThreadPool* pool, Isa isa,
                 std::int64_t x_stride, std::int64_t y_stride, InputRows input) {
    const std::int64_t row_width = input.kind == InputRows::kSiluAndMul ? 2 * w.k : w.k;
    if (x_stride == 0) x_stride = row_width;
    if (y_stride == 0) y_stride = w.n;
    TSR_CHECK(w.data.size() > 0 || w.n_padded * w.k_padded == 0)
        << "matmul: unpacked weight of type " << dtype_name(w.dtype);
    TSR_CHECK(x_stride >= row_width && y_stride >= w.n)
        << "matmul: strides (" << x_stride << ", " << y_stride << ") below k=" << row_width
        << ", n=" << w.n;
    if (m <= 0 || w.n == 0) return;
    if (m > kRowBlock) {
        // Tall inputs (long prefills) in row blocks: the kernels stream the input once per
        // group of output panels, and a block's rows stay in the caches between groups,
        // where all rows of a 4096-row input would come from memory each time (measured
        // ~10 % slower). Re-reading the weight per block costs little next to the work.
        for (std::int64_t r0 = 0; r0 < m; r0 += kRowBlock)
            matmul_rows(x + r0 * x_stride, std::min(kRowBlock, m - r0), w, y + r0 * y_stride, pool, isa, x_stride,
                        y_stride, input);
        return;
    }
    if (w.k == 0) {
        for (std::int64_t r = 0; r < m; ++r) std::fill_n(y + r * y_stride, w.n, 0.0f);
        return;
    }
    isa = usable_isa(isa);

    const std::int64_t n_panels = w.n_padded / kPanelWidth;
    const bool avx512 = uses_avx512_bf16(isa);
    // Only the AVX-512 preparation computes the rows piece by piece; the other paths read them
    // from a buffer.
    if (input.kind != InputRows::kPlain && !(avx512 && w.dtype != DType::kF32)) {
        x = computed_rows(x, x_stride, m, w.k, input, pool);
        x_stride = w.k;
        input = InputRows{};
    }
    if (isa == Isa::kReference) {
        split(pool, n_panels, 1, [&](std::int64_t p0, std::int64_t p1) {
            matmul_packed_reference(x, x_stride, w, y, y_stride, 0, m, p0, p1);
        });
        return;
    }

    // AMX tiles from kAmxMinRows rows, for bf16 weights and for fp8 ones dequantized to bf16;
    // never when batch-invariant, since a tile sums its products in another order than the
    // vector kernel that computes fewer rows.
    const bool amx_rows = isa == Isa::kAmx && m >= cpu::kAmxMinRows && !batch_invariant();
    const bool amx = amx_rows && w.dtype == DType::kBF16;
    cpu::MatmulOperands op;
    op.m = m;
    op.w = &w;
    op.y = y;
    op.y_stride = y_stride;
    if (w.dtype == DType::kF32) {
        op.a = x;
        op.a_stride = x_stride;
    } else {
        op.a = prepare_input(x, x_stride, m, w, input, avx512, amx, pool, &op.a_stride);
    }

    const std::int64_t group = avx512 ? cpu::panel_group_avx512() : cpu::panel_group_avx2();
    if (is_fp8(w.dtype)) {
        matmul_fp8(op, avx512, amx_rows, group, pool);
        return;
    }
    if (amx) {
        matmul_amx(op, n_panels, pool);
        return;
    }
    const auto tile = avx512 ? &cpu::matmul_tile_avx512 : &cpu::matmul_tile_avx2;
    const int n_workers = pool == nullptr ? 1 : pool->size();
    const std::int64_t n_groups = (n_panels + group - 1) / group;
    // Split the weight (each thread streams its own part once) unless there are too few
    // panel groups to balance and enough rows to split instead.
    if (n_groups >= 4 * n_workers || m < 2 * kRowAlign * n_workers) {
        split(pool, n_panels, group, [&](std::int64_t p0, std::int64_t p1) {
            tile(op, cpu::OutputTile{0, m, p0, p1});
        });
    } else {
        split(pool, m, kRowAlign, [&](std::int64_t r0, std::int64_t r1) {
            tile(op, cpu::OutputTile{r0, r1, 0, n_panels});
        });
    }
}

// Whether matmul_gated_mlp makes the activation from the accumulators: row blocks of at least
// kAmxMinRows rows on AMX tiles, for bf16 weights whose gate and up halves start on a panel.
bool gated_mlp_fuses(const PackedWeight& gate_up, const PackedWeight& down, Isa isa) {
    return usable_isa(isa) == Isa::kAmx && !batch_invariant() && gate_up.dtype == DType::kBF16 &&
           down.dtype == DType::kBF16 && gate_up.n == 2 * down.k && down.k > 0 && down.k % kPanelWidth == 0;
}

}  // namespace

// Row blocks of kRowBlock, as matmul_rows takes them: on AMX tiles the activation goes from the
// gate / up accumulators into down's operand; otherwise through gate_up_rows.
void matmul_gated_mlp(const float* x, std::int64_t m, const float* norm_weight, float eps,
                      const PackedWeight& gate_up, const PackedWeight& down, float* gate_up_rows, float* y,
                      ThreadPool* pool, Isa isa) {
    const InputRows input = norm_weight == nullptr
                                ? InputRows{}
                                : InputRows{.kind = InputRows::kRmsNorm, .norm_weight = norm_weight, .eps = eps};
    isa = usable_isa(isa);
    const std::int64_t k = down.k;
    const auto unfused = [&](std::int64_t r0, std::int64_t rows) {
        matmul_rows(x + r0 * gate_up.k, rows, gate_up, gate_up_rows, pool, isa, 0, 0, input);
        matmul_rows(gate_up_rows, rows, down, y + r0 * down.n, pool, isa, 0, 0,
                    InputRows{.kind = InputRows::kSiluAndMul});
    };
    if (!gated_mlp_fuses(gate_up, down, isa)) {
        unfused(0, m);
        return;
    }
    for (std::int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
        const std::int64_t rows = std::min(kRowBlock, m - r0);
        if (rows < cpu::kAmxMinRows) {
            unfused(r0, rows);
            continue;
        }
        std::int64_t a_stride = 0;
        const auto* a = static_cast<const std::uint16_t*>(
            prepare_input(x + r0 * gate_up.k, gate_up.k, rows, gate_up, input, true, true, pool, &a_stride));
        cpu::MatmulOperands op;
        op.m = rows;
        op.w = &down;
        op.y = y + r0 * down.n;
        op.y_stride = down.n;
        op.a_stride = amx_row_stride(down.k_padded);
        auto* act = scratch<std::uint16_t, 1>(rows * op.a_stride);
        const std::int64_t pairs = k / kPanelWidth;
        const std::int64_t panel_bytes = packed_panel_bytes(gate_up);
        const std::byte* gate = gate_up.data.data();
        split(pool, pairs, 1, [&](std::int64_t p0, std::int64_t p1) {
            cpu::gemm_gated_panels_amx(a, a_stride, rows, gate + p0 * panel_bytes, panel_bytes, p1 - p0,
                                       pairs * panel_bytes, gate_up.k_padded / 2, act + p0 * kPanelWidth,
                                       op.a_stride);
        });
        op.a = act;
        matmul_amx(op, down.n_padded / kPanelWidth, pool);
    }
}

void matmul(const float* x, std::int64_t m, const PackedWeight& w, float* y, ThreadPool* pool, Isa isa,
            std::int64_t x_stride, std::int64_t y_stride) {
    matmul_rows(x, m, w, y, pool, isa, x_stride, y_stride, InputRows{});
}

void matmul_silu_and_mul(const float* gate_up, std::int64_t m, const PackedWeight& w, float* y, ThreadPool* pool,
                         Isa isa) {
    matmul_rows(gate_up, m, w, y, pool, isa, 0, 0, InputRows{.kind = InputRows::kSiluAndMul});
}

void matmul_rms_norm(const float* x, std::int64_t m, const float* norm_weight, float eps, const PackedWeight& w,
                     float* y, ThreadPool* pool, Isa isa) {
    matmul_rows(x, m, w, y, pool, isa, 0, 0,
                InputRows{.kind = InputRows::kRmsNorm, .norm_weight = norm_weight, .eps = eps});
}

std::int64_t gated_mlp_rows_floats(std::int64_t m, const PackedWeight& gate_up, const PackedWeight& down, Isa isa) {
    if (m <= 0) return 0;
    return (gated_mlp_fuses(gate_up, down, isa) ? std::min(m, cpu::kAmxMinRows - 1) : m) * gate_up.n;
}

void matmul_reference(const float* x, std::int64_t m, const float* w, std::int64_t n,
                      std::int64_t k, float* y) {
    for (std::int64_t r = 0; r < m; ++r) {
        for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (std::int64_t c = 0; c < k; ++c) {
                acc += static_cast<double>(x[r * k + c]) * static_cast<double>(w[j * k + c]);
            }
            y[r * n + j] = static_cast<float>(acc);
        }
    }
}

}  // namespace tessera::kernels
