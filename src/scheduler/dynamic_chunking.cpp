#include "scheduler/dynamic_chunking.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>
#include <string_view>

#include <fmt/core.h>

// The predictor must return SGLang's chunk sizes token for token, and those come from
// Python's double arithmetic with every product rounded on its own: e.g. for C = 8192 the
// first chunk is x = 8191.999999999998, int() → 8191, aligned → 8128, not 8192. Fused
// multiply-adds (which -march=x86-64-v3 allows the compiler to form) would change such last
// bits, so contraction is switched off for the definitions below.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace tessera::scheduler {

namespace {

constexpr const char* kSmoothFactorVar = "SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR";
constexpr size_t kMinFitSamples = 8;      // after dropping the warm-up sample
constexpr int kProfileSteps = 128;
constexpr int64_t kMinAlignment = 64;     // chunks are never aligned to less than 64 tokens
constexpr int64_t kContextMargin = 100;   // tokens a chunk leaves free below context_len

Status invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

// Solves the 3×3 system m·x = r by Gaussian elimination with partial pivoting.
// nullopt when a pivot vanishes (the samples do not determine three coefficients).
std::optional<std::array<double, 3>> solve3(std::array<std::array<double, 3>, 3> m, std::array<double, 3> r) {
    for (int col = 0; col < 3; ++col) {
        int pivot = col;
        for (int row = col + 1; row < 3; ++row)
            if (std::abs(m[row][col]) > std::abs(m[pivot][col])) pivot = row;
        if (std::abs(m[pivot][col]) < 1e-12) return std::nullopt;
        std::swap(m[col], m[pivot]);
        std::swap(r[col], r[pivot]);
        for (int row = col + 1; row < 3; ++row) {
            const double f = m[row][col] / m[col][col];
            for (int k = col; k < 3; ++k) m[row][k] -= f * m[col][k];
            r[row] -= f * r[col];
        }
    }
    std::array<double, 3> x{};
    for (int row = 2; row >= 0; --row) {
        double v = r[row];
        for (int k = row + 1; k < 3; ++k) v -= m[row][k] * x[k];
        x[row] = v / m[row][row];
    }
    return x;
}

}  // namespace

double QuadraticFit::operator()(double l) const { return a * l * l + b * l + c; }

std::vector<int> profile_lengths(int chunked_prefill_size) {
    std::vector<int> lengths;
    // 1.25·C so the fit also covers chunks somewhat longer than C; the step is the floor of
    // a float division, as Python's `//` on a float.
    const double longest = chunked_prefill_size * 1.25;
    const double step = std::floor(longest / kProfileSteps);
    for (int i = 0; i < kProfileSteps; ++i) {
        const int len = static_cast<int>(longest - i * step);
        if (len <= 0) break;
        lengths.push_back(len);
    }
    return lengths;
}

StatusOr<QuadraticFit> fit_prefill_cost(std::span<const PrefillSample> samples) {
    // The first run pays for lazy initialisation and cold caches, so it would bias the fit.
    const std::span<const PrefillSample> used = samples.empty() ? samples : samples.subspan(1);
    if (used.size() < kMinFitSamples)
        return invalid(fmt::format(
            "Not enough data points for quadratic fitting ({} < {}). Need at least {} samples with "
            "different sequence lengths (plus one warm-up sample, which is dropped).",
            used.size(), kMinFitSamples, kMinFitSamples));
    std::set<int64_t> distinct;
    double scale = 0.0;
    for (const PrefillSample& s : used) {
        distinct.insert(s.len);
        scale = std::max(scale, std::abs(static_cast<double>(s.len)));
    }
    if (distinct.size() < 3)
        return invalid(fmt::format(
            "Failed to fit f(l) = al^2 + bl + c: the {} samples have only {} distinct lengths; "
            "a quadratic needs at least 3",
            used.size(), distinct.size()));

    // Normal equations in t = l / max|l|: with raw lengths of ~10^4 tokens the l^4 entries
    // reach 10^16 and the system would lose most of its digits; on [0, 1] it stays well
    // conditioned.
    std::array<std::array<double, 3>, 3> gram{};
    std::array<double, 3> rhs{};
    for (const PrefillSample& s : used) {
        const double t = static_cast<double>(s.len) / scale;
        const std::array<double, 3> row = {t * t, t, 1.0};
        for (int i = 0; i < 3; ++i) {
            for (int j = 0; j < 3; ++j) gram[i][j] += row[i] * row[j];
            rhs[i] += row[i] * s.ms;
        }
    }
    const auto coeffs = solve3(gram, rhs);
    if (!coeffs) return invalid("Failed to fit f(l) = al^2 + bl + c: insufficient rank");

    QuadraticFit fit;
    fit.a = (*coeffs)[0] / (scale * scale);
    fit.b = (*coeffs)[1] / scale;
    fit.c = (*coeffs)[2];
    if (!(fit.a > 0))
        return invalid(fmt::format(
            "Fitted quadratic coefficient a={:.2e} is not positive. Attention has O(n^2) "
            "complexity, so a must be positive. Check warmup data quality.",
            fit.a));
    if (fit.b < 0) {
        fit.warning = fmt::format("Fitted linear coefficient b={:.2e} is negative. Setting b=0.", fit.b);
        fit.b = 0.0;
    }
    return fit;
}

StatusOr<double> parse_dynamic_chunking_smooth_factor(const std::optional<std::string>& value) {
    if (!value) return kDefaultDynamicChunkingSmoothFactor;
    const std::string_view text = trim(*value);
    double v = 0.0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        return invalid(fmt::format(
            "{}='{}' is not a number; set it to a number in [0, 1] (0 keeps the fixed chunk size, "
            "1 follows the fitted cost model; default {}) or unset it",
            kSmoothFactorVar, *value, kDefaultDynamicChunkingSmoothFactor));
    if (!(v >= 0.0 && v <= 1.0))  // also rejects nan
        return invalid(fmt::format(
            "{}={} is outside [0, 1]; set it to a number in [0, 1] (0 keeps the fixed chunk size, "
            "1 follows the fitted cost model; default {}) or unset it",
            kSmoothFactorVar, *value, kDefaultDynamicChunkingSmoothFactor));
    return v;
}

Status ChunkSizePredictorConfig::validate() const {
    if (initial_chunk_size < 1)
        return invalid(fmt::format(
            "dynamic chunking needs a positive initial chunk size (--chunked-prefill-size), got {}",
            initial_chunk_size));
    if (!(smooth_factor >= 0.0 && smooth_factor <= 1.0))
        return invalid(fmt::format("{} must be a number in [0, 1], got {}", kSmoothFactorVar, smooth_factor));
    if (page_size < 1) return invalid(fmt::format("page_size ({}) must be >= 1", page_size));
    if (context_len < 1) return invalid(fmt::format("context_len ({}) must be >= 1", context_len));
    if (max_prefill_tokens < 1)
        return invalid(fmt::format("--max-prefill-tokens ({}) must be >= 1", max_prefill_tokens));
    return Status::Ok();
}

StatusOr<ChunkSizePredictor> ChunkSizePredictor::create(const QuadraticFit& fit,
                                                        const ChunkSizePredictorConfig& config) {
    TSR_RETURN_IF_ERROR(config.validate());
    if (!(fit.a > 0))
        return invalid(fmt::format(
            "quadratic coefficient a={:.2e} is not positive. Attention has O(n^2) complexity, so "
            "a must be positive.",
            fit.a));
    // The cost of one chunk of C tokens on an empty prefix; every later chunk aims at it.
    const double target = fit(static_cast<double>(config.initial_chunk_size)) - fit(0.0);
    if (!(target > 0))
        return invalid(fmt::format(
            "Calculated target_latency={:.2f}ms (f(C) - f(0) for C={}) is not positive. Check "
            "warmup data quality.",
            target, config.initial_chunk_size));
    return ChunkSizePredictor(fit, config, target);
}

int64_t ChunkSizePredictor::alignment() const {
    return std::max<int64_t>(config_.page_size, kMinAlignment);
}

std::optional<int64_t> ChunkSizePredictor::next_chunk(int64_t history_len) const {
    // f(L + x) − f(L) = target  ⇔  a x² + (2aL + b) x − target = 0; take the positive root.
    // Written exactly as SGLang does (not the cancellation-free variant) so the rounding,
    // and therefore the chunk sizes, are the same.
    const double big_a = fit_.a;
    const double big_b = 2 * fit_.a * static_cast<double>(history_len) + fit_.b;
    const double big_c = -target_ms_;
    const double discriminant = big_b * big_b - 4 * big_a * big_c;
    if (discriminant < 0) return std::nullopt;
    const double x = (-big_b + std::sqrt(discriminant)) / (2 * big_a);
    if (x <= 0) return std::nullopt;

    // Smoothing pulls the root back towards C to avoid abrupt drops in chunk size from one
    // step to the next; the C/4 floor keeps late chunks from becoming too small to be efficient.
    const int64_t c = config_.initial_chunk_size;
    double smoothed = static_cast<double>(c) + config_.smooth_factor * (x - static_cast<double>(c));
    smoothed = std::min(smoothed, 0x1p62);  // int() of a huge root must not overflow; clamped below
    int64_t size = std::max(static_cast<int64_t>(smoothed), c / 4);

    const int64_t align = alignment();
    size = size / align * align;
    size = std::max(size, align);
    const int64_t max_allowed = std::min(config_.context_len - history_len - kContextMargin,
                                         config_.max_prefill_tokens);
    size = std::min(size, max_allowed);
    size = size / align * align;  // truncation vs Python's floor only differs below 0: None either way
    if (size < align) return std::nullopt;
    return size;
}

}  // namespace tessera::scheduler
