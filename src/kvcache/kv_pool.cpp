#include "kvcache/kv_pool.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "base/check.h"

namespace tessera::kvcache {

// ---- KvPool -------------------------------------------------------------------------------

KvPool::KvPool(const KvPoolConfig& config) : config_(config) {
    TSR_CHECK(config.page_size >= 1) << "page_size " << config.page_size;
    TSR_CHECK(config.n_slots % config.page_size == 0)
        << "n_slots " << config.n_slots << " is not a multiple of page_size " << config.page_size;
    // One extra page in front: slot 0 (and the rest of page 0) is the padding row that
    // padded positions may point at without touching a live sequence's K/V.
    const auto rows = config.n_slots + config.page_size;
    const auto bytes = static_cast<std::size_t>(rows * config.shape.row_bytes());
    k_.reserve(static_cast<std::size_t>(config.shape.n_layers));
    v_.reserve(static_cast<std::size_t>(config.shape.n_layers));
    for (std::int64_t l = 0; l < config.shape.n_layers; ++l) {
        k_.emplace_back(bytes);
        if (config.shape.has_v()) v_.emplace_back(bytes);
    }
}

// ---- SlotAllocator --------------------------------------------------------------------------
// Page p (1-based; page 0 is the padding page) covers slots [p·page_size, (p+1)·page_size).
// A page is owned by one sequence (or by the prefix cache) from its first slot on, so the
// sequence may keep filling it; used_in_page_ counts the slots actually handed out.

SlotAllocator::SlotAllocator(std::int64_t n_slots, std::int64_t page_size)
    : n_slots_(n_slots), page_size_(page_size) {
    TSR_CHECK(page_size >= 1) << "page_size " << page_size;
    TSR_CHECK(n_slots >= 0 && n_slots % page_size == 0)
        << "n_slots " << n_slots << " is not a multiple of page_size " << page_size;
    const auto n_pages = n_slots / page_size;
    used_in_page_.assign(static_cast<std::size_t>(n_pages + 1), 0);
    if (n_pages > 0) free_runs_.emplace(1, static_cast<std::int32_t>(n_pages));
    free_pages_ = n_pages;
}

std::int64_t SlotAllocator::take_from(std::int32_t page, std::int64_t count, std::vector<std::int32_t>* pages) {
    auto it = free_runs_.upper_bound(page);
    if (it == free_runs_.begin()) return 0;
    --it;
    const std::int32_t first = it->first;
    const std::int32_t end = first + it->second;  // one past the run
    if (page >= end) return 0;                     // `page` is in use
    const auto taken = static_cast<std::int32_t>(std::min<std::int64_t>(count, end - page));
    free_runs_.erase(it);
    if (page > first) free_runs_.emplace(first, page - first);
    if (page + taken < end) free_runs_.emplace(page + taken, end - (page + taken));
    for (std::int32_t p = page; p < page + taken; ++p) pages->push_back(p);
    free_pages_ -= taken;
    return taken;
}

void SlotAllocator::release_page(std::int32_t page) {
    std::int32_t first = page;
    std::int32_t length = 1;
    auto next = free_runs_.find(page + 1);
    if (next != free_runs_.end()) {
        length += next->second;
        free_runs_.erase(next);
    }
    auto it = free_runs_.lower_bound(page);
    if (it != free_runs_.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == page) {
            first = prev->first;
            length += prev->second;
            free_runs_.erase(prev);
        }
    }
    free_runs_.emplace(first, length);
    ++free_pages_;
}

std::int32_t SlotAllocator::place_new_run(std::int64_t count, std::int64_t limit) const {
    const std::int64_t gap = (kGrowthSlots + page_size_ - 1) / page_size_;
    for (const auto& [first, length] : free_runs_) {
        // Page 0 is padding, so a run starting at page 1 follows no sequence.
        const std::int64_t skip = first > 1 ? gap : 0;
        if (first + skip + count > limit) break;  // runs are in page order
        if (length >= skip + count) return static_cast<std::int32_t>(first + skip);
    }
    return -1;
}

std::int32_t SlotAllocator::split_touched_hole(std::int64_t count) const {
    std::int64_t best_first = -1;
    std::int64_t best_length = 0;
    for (const auto& [first, length] : free_runs_) {
        if (first >= high_water_) break;
        const std::int64_t inside = std::min<std::int64_t>(length, high_water_ - first);
        if (inside > best_length) {
            best_first = first;
            best_length = inside;
        }
    }
    if (best_length < count) return -1;
    const std::int64_t gap = (kGrowthSlots + page_size_ - 1) / page_size_;
    const std::int64_t skip = best_first > 1 ? std::min(gap, (best_length - count) / 2) : 0;
    return static_cast<std::int32_t>(best_first + skip);
}

std::int64_t SlotAllocator::free_pages_below(std::int64_t limit) const {
    std::int64_t n = 0;
    for (const auto& [first, length] : free_runs_) {
        if (first >= limit) break;
        n += std::min<std::int64_t>(length, limit - first);
    }
    return n;
}

std::optional<std::vector<std::int32_t>> SlotAllocator::alloc(std::int64_t n,
                                                              std::int32_t last_slot) {
    std::vector<std::int32_t> out;
    if (n <= 0) return out;
    out.reserve(static_cast<std::size_t>(n));

    // Room left in the sequence's current page.
    std::int64_t take_in_page = 0;
    std::int32_t page = -1;
    if (last_slot >= 0) {
        page = static_cast<std::int32_t>(last_slot / page_size_);
        TSR_CHECK(page >= 1 && page < static_cast<std::int64_t>(used_in_page_.size()))
            << "last_slot " << last_slot << " is outside the pool";
    }
    if (last_slot >= 0 && page_size_ > 1) {
        const std::int64_t room = (page + 1) * page_size_ - (last_slot + 1);
        take_in_page = std::min(room, n);
        if (take_in_page > 0) {
            // The sequence must own the page up to last_slot and nothing after it.
            TSR_CHECK_EQ(used_in_page_[page], last_slot % page_size_ + 1);
        }
    }
    const std::int64_t rest = n - take_in_page;
    const std::int64_t pages_needed = (rest + page_size_ - 1) / page_size_;
    if (pages_needed > free_pages_) return std::nullopt;

    for (std::int64_t i = 1; i <= take_in_page; ++i) out.push_back(last_slot + static_cast<std::int32_t>(i));
    if (take_in_page > 0) used_in_page_[page] += static_cast<std::int32_t>(take_in_page);

    // Pages: first the ones right after the sequence's; then a new run placed as the class
    // comment says (touched pages first); last (a fragmented pool) the lowest free pages.
    std::vector<std::int32_t> pages;
    pages.reserve(static_cast<std::size_t>(pages_needed));
    const auto missing = [&] { return pages_needed - static_cast<std::int64_t>(pages.size()); };
    if (page >= 1 && pages_needed > 0) take_from(page + 1, pages_needed, &pages);
    if (missing() > 0) {
        std::int32_t start = place_new_run(missing(), high_water_);
        bool use_fragments = false;
        const std::int64_t touched_free = free_pages_below(high_water_);
        if (start < 1 && 4 * touched_free >= high_water_ - 1) {
            start = split_touched_hole(missing());
            use_fragments = start < 1 && touched_free >= missing();
        }
        if (start < 1 && !use_fragments) start = place_new_run(missing(), std::numeric_limits<std::int64_t>::max());
        if (start >= 1) take_from(start, missing(), &pages);
    }
    while (missing() > 0) take_from(free_runs_.begin()->first, missing(), &pages);
    for (const std::int32_t p : pages) high_water_ = std::max<std::int64_t>(high_water_, p + 1);

    std::int64_t left = rest;
    for (const std::int32_t p : pages) {
        const std::int64_t used = std::min(left, page_size_);
        const auto first = static_cast<std::int32_t>(p * page_size_);
        for (std::int64_t s = 0; s < used; ++s) out.push_back(first + static_cast<std::int32_t>(s));
        used_in_page_[p] = static_cast<std::int32_t>(used);
        left -= used;
    }
    return out;
}

void SlotAllocator::free(const std::vector<std::int32_t>& slots) {
    for (const std::int32_t slot : slots) {
        const std::int64_t page = slot / page_size_;
        TSR_CHECK(page >= 1 && page < static_cast<std::int64_t>(used_in_page_.size()))
            << "freeing slot " << slot << " outside the pool (or the padding page)";
        TSR_CHECK(used_in_page_[page] > 0) << "double free of slot " << slot;
        if (--used_in_page_[page] == 0) release_page(static_cast<std::int32_t>(page));
    }
}

void SlotAllocator::forget_touched() {
    TSR_CHECK(available() == n_slots_) << "forget_touched with slots in use";
    high_water_ = 1;
}

std::int64_t SlotAllocator::available() const { return free_pages_ * page_size_; }

KvView KvPool::view() {
    KvView view;
    view.dtype = config_.shape.dtype;
    view.layer_bytes = k_.empty() ? 0 : k_.front().size();
    for (std::int64_t l = 0; l < config_.shape.n_layers; ++l) {
        view.k.push_back(k(l));
        view.v.push_back(v(l));
    }
    return view;
}

}  // namespace tessera::kvcache
