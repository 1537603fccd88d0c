#include "layers/linear.h"

#include <cstring>

#include "base/check.h"
#include "loader/weight_source.h"
#include "tensor/fp8_blocks.h"

namespace tessera::layers {

// SGLang's Fp8LinearMethod.validate_block_quant_shapes: a shard of a block-quantized weight
// starts and ends on block boundaries (or at the tensor's end), so it owns whole scales.
Status check_block_split(const std::string& name, const char* what, const char* block_name, std::int64_t begin,
                         std::int64_t count, std::int64_t total, std::int64_t block) {
    if (count == total || block >= total) return Status::Ok();
    if (begin % block == 0 && (count % block == 0 || begin + count == total)) return Status::Ok();
    return Status::InvalidArgument("Weight " + std::string(what) + " = " + std::to_string(count) +
                                   " is not divisible by weight quantization " + block_name + " = " +
                                   std::to_string(block) + " (tensor '" + name +
                                   "'): choose a --tp-size (or --ep-size for experts) that splits it into whole blocks");
}

namespace {
std::int64_t rows_of(const LinearPart& p) { return p.row_count < 0 ? p.out_features - p.row_begin : p.row_count; }

Status check_range(const std::string& what, std::int64_t begin, std::int64_t count, std::int64_t total) {
    if (begin < 0 || count < 0 || begin + count > total) {
        return Status::InvalidArgument(what + ": shard [" + std::to_string(begin) + ", " +
                                       std::to_string(begin + count) + ") is outside [0, " +
                                       std::to_string(total) + ")");
    }
    return Status::Ok();
}

// The fp8 path of Linear::load: codes kept as they are (an FP8 checkpoint) or quantized here in
// 128 × 128 blocks on the checkpoint's grid (--quantization fp8 on a bf16 / f32 checkpoint);
// each row keeps one multiplier per 128 columns, as kernels::pack_fp8_weight takes them.
StatusOr<kernels::PackedWeight> load_fp8(const loader::WeightSource& source, const LinearSpec& spec,
                                         const std::vector<const loader::TensorView*>& tensors, std::int64_t cols,
                                         std::int64_t total_rows) {
    const bool serialized = is_fp8(tensors.front()->dtype);
    const DType type = serialized ? tensors.front()->dtype : spec.compute_dtype;
    constexpr std::int64_t kQuantizeBlock = kernels::kFp8ScaleBlock;
    // Columns per packed scale: the checkpoint's block width when its scales change along a
    // row, else the kernels' default.
    std::int64_t scale_block = kernels::kFp8ScaleBlock;
    bool blockwise = false;
    if (serialized) {
        for (std::size_t i = 0; i < spec.parts.size(); ++i) {
            TSR_ASSIGN_OR_RETURN(loader::Fp8Scales scales,
                                 source.fp8_scales(spec.parts[i].name, spec.parts[i].out_features, spec.in_features));
            if (scales.block_k >= spec.in_features) continue;
            if (scales.block_k % 4 != 0 || (blockwise && scales.block_k != scale_block))
                return Status::Unimplemented("'" + spec.parts[i].name + "': weight_block_size column " +
                                             std::to_string(scales.block_k) +
                                             " is not supported; tessera's fp8 kernels need a multiple of 4");
            scale_block = scales.block_k;
            blockwise = true;
        }
    }
    const std::int64_t blocks = (cols + scale_block - 1) / scale_block;
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(total_rows * cols));
    std::vector<float> row_scales(static_cast<std::size_t>(total_rows * blocks));
    std::int64_t out_row = 0;
    for (std::size_t i = 0; i < spec.parts.size(); ++i) {
        const LinearPart& p = spec.parts[i];
        const loader::TensorView* t = tensors[i];
        if (is_fp8(t->dtype) != serialized || (serialized && t->dtype != type))
            return Status::InvalidArgument("'" + p.name + "' is " + std::string(dtype_name(t->dtype)) + " but '" +
                                           spec.parts.front().name + "', fused with it, is " +
                                           std::string(dtype_name(tensors.front()->dtype)));
        const std::int64_t rows = rows_of(p);
        if (serialized) {
            TSR_ASSIGN_OR_RETURN(loader::Fp8Scales scales, source.fp8_scales(p.name, p.out_features, spec.in_features));
            TSR_RETURN_IF_ERROR(check_block_split(p.name, "output_partition_size", "block_n", p.row_begin, rows,
                                                  p.out_features, scales.block_n));
            TSR_RETURN_IF_ERROR(check_block_split(p.name, "input_size_per_partition", "block_k", spec.col_begin, cols,
                                                  spec.in_features, scales.block_k));
            const auto* base = reinterpret_cast<const std::uint8_t*>(t->data);
            for (std::int64_t r = 0; r < rows; ++r) {
                const std::int64_t src_row = p.row_begin + r;
                std::memcpy(codes.data() + (out_row + r) * cols, base + src_row * spec.in_features + spec.col_begin,
                            static_cast<std::size_t>(cols));
                for (std::int64_t b = 0; b < blocks; ++b)
                    row_scales[(out_row + r) * blocks + b] = scales.at(src_row, spec.col_begin + b * scale_block);
            }
        } else {
            TSR_RETURN_IF_ERROR(check_block_split(p.name, "output_partition_size", "block_n", p.row_begin, rows,
                                                  p.out_features, kQuantizeBlock));
            TSR_RETURN_IF_ERROR(check_block_split(p.name, "input_size_per_partition", "block_k", spec.col_begin, cols,
                                                  spec.in_features, kQuantizeBlock));
            TSR_ASSIGN_OR_RETURN(auto w, source.read_rows_f32(p.name, p.out_features, spec.in_features, p.row_begin, rows));
            const Fp8Blocks q = quantize_fp8_blocks(w.data(), rows, spec.in_features, type, kQuantizeBlock);
            for (std::int64_t r = 0; r < rows; ++r) {
                std::memcpy(codes.data() + (out_row + r) * cols, q.codes.data() + r * spec.in_features + spec.col_begin,
                            static_cast<std::size_t>(cols));
                for (std::int64_t b = 0; b < blocks; ++b)
                    row_scales[(out_row + r) * blocks + b] = q.scale(r, spec.col_begin + b * scale_block);
            }
        }
        out_row += rows;
    }
    return kernels::pack_fp8_weight(codes.data(), type, total_rows, cols, row_scales.data(), scale_block);
}
}  // namespace

StatusOr<Linear> Linear::load(const loader::WeightSource& source, const LinearSpec& spec) {
    const std::int64_t cols = spec.col_count < 0 ? spec.in_features - spec.col_begin : spec.col_count;
    TSR_RETURN_IF_ERROR(check_range("columns of " + spec.parts.at(0).name, spec.col_begin, cols, spec.in_features));
    std::int64_t total_rows = 0;
    for (const auto& p : spec.parts) total_rows += rows_of(p);

    // Only this rank's rows and columns are read from the mapping, then packed once. They
    // are gathered in the checkpoint's own dtype (f32 only when the parts disagree), and a
    // single whole-width part is packed straight from the mapping: a temporary f32 copy of
    // a vocab-sized head would double the start-up peak.
    std::vector<const loader::TensorView*> tensors;
    for (const auto& p : spec.parts) {
        TSR_ASSIGN_OR_RETURN(auto t, source.get(p.name, {p.out_features, spec.in_features}));
        TSR_RETURN_IF_ERROR(check_range("rows of " + p.name, p.row_begin, rows_of(p), p.out_features));
        tensors.push_back(t);
    }
    Linear linear;
    if (is_fp8(tensors.front()->dtype) || is_fp8(spec.compute_dtype)) {
        TSR_ASSIGN_OR_RETURN(linear.weight_, load_fp8(source, spec, tensors, cols, total_rows));
        TSR_RETURN_IF_ERROR(linear.load_bias(source, spec, total_rows));
        return linear;
    }
    for (const auto* t : tensors)
        if (is_fp8(t->dtype))
            return Status::InvalidArgument("'" + t->name + "' is fp8 but '" + spec.parts.front().name +
                                           "', fused with it, is " + std::string(dtype_name(tensors.front()->dtype)));
    DType gather_type = tensors.front()->dtype;
    for (const auto* t : tensors)
        if (t->dtype != gather_type) gather_type = DType::kF32;
    const std::size_t elem = dtype_size(gather_type);
    if (tensors.size() == 1 && cols == spec.in_features) {
        // Packed in row blocks, each block's file pages released once packed.
        constexpr std::int64_t kRowsPerBlock = 2048;
        const auto* rows = reinterpret_cast<const unsigned char*>(tensors.front()->data) +
                           static_cast<std::size_t>(spec.parts.front().row_begin) * cols * elem;
        linear.weight_ = kernels::empty_packed_weight(spec.compute_dtype, total_rows, cols);
        for (std::int64_t r = 0; r < total_rows; r += kRowsPerBlock) {
            const std::int64_t n = std::min(kRowsPerBlock, total_rows - r);
            const unsigned char* block = rows + static_cast<std::size_t>(r * cols) * elem;
            kernels::pack_weight_rows(block, gather_type, r, n, linear.weight_);
            loader::WeightSource::drop_resident_pages(block, static_cast<std::size_t>(n * cols) * elem);
        }
    } else {
        std::vector<unsigned char> kept(static_cast<std::size_t>(total_rows * cols) * elem);
        std::int64_t out_row = 0;
        for (std::size_t i = 0; i < spec.parts.size(); ++i) {
            const LinearPart& p = spec.parts[i];
            const loader::TensorView* t = tensors[i];
            const auto* base = reinterpret_cast<const unsigned char*>(t->data);
            const std::size_t src_elem = dtype_size(t->dtype);
            for (std::int64_t r = 0; r < rows_of(p); ++r) {
                const auto offset = (static_cast<std::size_t>(p.row_begin + r) * spec.in_features + spec.col_begin);
                unsigned char* dst = kept.data() + static_cast<std::size_t>(out_row + r) * cols * elem;
                if (t->dtype == gather_type) {
                    std::memcpy(dst, base + offset * src_elem, static_cast<std::size_t>(cols) * elem);
                } else {
                    convert_to_f32(base + offset * src_elem, t->dtype, reinterpret_cast<float*>(dst),
                                   static_cast<std::size_t>(cols));
                }
            }
            out_row += rows_of(p);
        }
        linear.weight_ = kernels::pack_weight(kept.data(), gather_type, total_rows, cols, spec.compute_dtype);
    }
    TSR_RETURN_IF_ERROR(linear.load_bias(source, spec, total_rows));
    return linear;
}

Status Linear::load_bias(const loader::WeightSource& source, const LinearSpec& spec, std::int64_t total_rows) {
    if (!spec.bias) return Status::Ok();
    bias_.resize(static_cast<std::size_t>(total_rows));
    std::int64_t row = 0;
    for (const auto& p : spec.parts) {
        std::string bias_name = p.name;
        bias_name.replace(bias_name.rfind(".weight"), 7, ".bias");
        TSR_ASSIGN_OR_RETURN(auto b, source.get(bias_name, {p.out_features}));
        const auto* base = reinterpret_cast<const unsigned char*>(b->data);
        convert_to_f32(base + static_cast<std::size_t>(p.row_begin) * dtype_size(b->dtype), b->dtype,
                       bias_.data() + row, static_cast<std::size_t>(rows_of(p)));
        row += rows_of(p);
    }
    return Status::Ok();
}

Linear Linear::from_f32(const float* weight, std::int64_t out_features, std::int64_t in_features,
                        DType compute_dtype) {
    Linear linear;
    linear.weight_ = kernels::pack_weight(weight, DType::kF32, out_features, in_features, compute_dtype);
    return linear;
}

StatusOr<std::vector<float>> load_f32_vector(const loader::WeightSource& source, const std::string& name,
                                             std::int64_t n) {
    TSR_ASSIGN_OR_RETURN(auto t, source.get(name, {n}));
    std::vector<float> v(static_cast<std::size_t>(n));
    convert_to_f32(t->data, t->dtype, v.data(), v.size());
    return v;
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool* pool) const {
    forward(x, m, y, pool, 0, 0);
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool* pool, std::int64_t x_stride,
                     std::int64_t y_stride) const {
    kernels::matmul(x, m, weight_, y, pool, kernels::active_isa(), x_stride, y_stride);
    add_bias(m, y, y_stride > 0 ? y_stride : weight_.n);
}

void Linear::forward(const LayerInput& input, std::int64_t m, float* y, ThreadPool* pool) const {
    if (input.norm_weight == nullptr) return forward(input.x, m, y, pool);
    kernels::matmul_rms_norm(input.x, m, input.norm_weight, input.eps, weight_, y, pool);
    add_bias(m, y, weight_.n);
}

void Linear::forward_gated_mlp(const LayerInput& input, std::int64_t m, const Linear& down, float* gate_up_rows,
                               float* y, ThreadPool* pool) const {
    TSR_CHECK(bias_.empty() && down.bias_.empty()) << "forward_gated_mlp: a gated MLP's projections have no bias";
    kernels::matmul_gated_mlp(input.x, m, input.norm_weight, input.eps, weight_, down.weight_, gate_up_rows, y, pool);
}

void Linear::add_bias(std::int64_t m, float* y, std::int64_t y_stride) const {
    if (bias_.empty()) return;
    for (std::int64_t r = 0; r < m; ++r)
        for (std::int64_t i = 0; i < weight_.n; ++i) y[r * y_stride + i] += bias_[i];
}

}  // namespace tessera::layers
