// tokenizer/bpe.cpp — see bpe.h.

#include "tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <mutex>
#include <span>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

// Open-addressing hash map from a (left id, right id) pair to its merge. The merge table is
// the hottest lookup of encoding, so it avoids std::unordered_map's node chasing.
class MergeTable {
 public:
    struct Merge {
        std::int32_t rank = -1;
        std::int32_t new_id = -1;
    };

    void reserve(std::size_t n) {
        std::size_t cap = 16;
        while (cap < n * 2) cap <<= 1;
        keys_.assign(cap, kEmpty);
        values_.assign(cap, Merge{});
        mask_ = cap - 1;
    }

    // Keeps the first (best-ranked) merge when a pair repeats.
    void insert(std::int32_t left, std::int32_t right, Merge m) {
        const std::uint64_t key = pack(left, right);
        for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
            if (keys_[i] == key) return;
            if (keys_[i] == kEmpty) {
                keys_[i] = key;
                values_[i] = m;
                return;
            }
        }
    }

    const Merge* find(std::int32_t left, std::int32_t right) const {
        const std::uint64_t key = pack(left, right);
        for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
            if (keys_[i] == key) return &values_[i];
            if (keys_[i] == kEmpty) return nullptr;
        }
    }

 private:
    static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
    static std::uint64_t pack(std::int32_t l, std::int32_t r) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) |
               static_cast<std::uint32_t>(r);
    }
    static std::size_t hash(std::uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        return static_cast<std::size_t>(k);
    }

    std::vector<std::uint64_t> keys_;
    std::vector<Merge> values_;
    std::size_t mask_ = 0;
};

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Bounded cache of piece → ids, split in shards so that threads rarely share a lock. A full
// shard is emptied rather than tracked per entry: pieces follow a Zipf law, so the frequent
// ones are back after a few words and the cache needs no LRU bookkeeping on the hot path.
class WordCache {
 public:
    static constexpr std::size_t kShards = 16;
    static constexpr std::size_t kEntriesPerShard = 4096;
    static constexpr std::size_t kMaxPieceBytes = 256;  // longer pieces are not cached

    bool lookup(std::string_view piece, std::size_t hash, std::vector<std::int32_t>& out) const {
        Shard& s = shards_[hash % kShards];
        std::lock_guard<std::mutex> lock(s.mu);
        const auto it = s.map.find(piece);
        if (it == s.map.end()) return false;
        out.insert(out.end(), it->second.begin(), it->second.end());
        return true;
    }

    void insert(std::string_view piece, std::size_t hash, std::span<const std::int32_t> ids) const {
        Shard& s = shards_[hash % kShards];
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.map.size() >= kEntriesPerShard) s.map.clear();
        s.map.emplace(std::string(piece), std::vector<std::int32_t>(ids.begin(), ids.end()));
    }

 private:
    struct Shard {
        std::mutex mu;
        std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>>
            map;  // GUARDED_BY(mu)
    };
    mutable std::array<Shard, kShards> shards_;
};

// Per-thread working memory of one merge run.
struct MergeScratch {
    struct Symbol {
        std::int32_t id;
        std::int32_t prev;  // index of the previous live symbol, -1 at the start
        std::int32_t next;  // index of the next live symbol, -1 at the end
    };
    struct Candidate {
        std::int32_t rank;
        std::int32_t pos;  // index of the left symbol
        std::int32_t new_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
};

// Min-heap order: lowest rank first, then leftmost position (HF's tie-break).
struct CandidateAfter {
    bool operator()(const MergeScratch::Candidate& a, const MergeScratch::Candidate& b) const {
        return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    }
};

}  // namespace

struct BpeModel::Impl {
    std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> vocab;
    std::array<std::int32_t, 256> byte_ids{};      // id of each single byte, -1 if absent
    std::array<std::int32_t, 256> fallback_ids{};  // id of "<0xHH>", -1 if absent
    MergeTable merges;
    BpeOptions options;
    WordCache cache;
};

BpeModel::BpeModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeModel::~BpeModel() = default;

StatusOr<std::unique_ptr<BpeModel>> BpeModel::create(
    const std::vector<std::pair<std::string, std::int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options) {
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->vocab.reserve(vocab.size());
    for (const auto& [bytes, id] : vocab) impl->vocab.emplace(bytes, id);
    for (int b = 0; b < 256; ++b) {
        const auto it = impl->vocab.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
        impl->byte_ids[b] = it == impl->vocab.end() ? -1 : it->second;
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);  // HF: format!("<{:#04X}>", byte)
        const auto fb = impl->vocab.find(std::string_view(name));
        impl->fallback_ids[b] = fb == impl->vocab.end() ? -1 : fb->second;
    }
    impl->merges.reserve(merges.size());
    std::string joined;
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [left, right] = merges[rank];
        joined.assign(left).append(right);
        const auto l = impl->vocab.find(left);
        const auto r = impl->vocab.find(right);
        const auto j = impl->vocab.find(joined);
        if (l == impl->vocab.end() || r == impl->vocab.end() || j == impl->vocab.end()) {
            return Status::InvalidArgument("tokenizer.json: model.merges[" + std::to_string(rank) +
                                           "] uses a token missing from model.vocab");
        }
        impl->merges.insert(l->second, r->second,
                            {static_cast<std::int32_t>(rank), j->second});
    }
    return std::unique_ptr<BpeModel>(new BpeModel(std::move(impl)));
}

std::optional<std::int32_t> BpeModel::id_of(std::string_view bytes) const {
    const auto it = impl_->vocab.find(bytes);
    if (it == impl_->vocab.end()) return std::nullopt;
    return it->second;
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<std::int32_t>& out) const {
    if (bytes.size() == 1) {
        const std::int32_t id = impl_->byte_ids[static_cast<unsigned char>(bytes[0])];
        if (id >= 0 || !impl_->options.char_symbols) {
            if (id >= 0) out.push_back(id);
            return;
        }
    }
    if (impl_->options.ignore_merges) {
        if (const auto id = id_of(bytes)) {
            out.push_back(*id);
            return;
        }
    }
    if (bytes.size() > WordCache::kMaxPieceBytes) {
        merge_piece(bytes, out);
        return;
    }
    const std::size_t hash = StringHash{}(bytes);
    if (impl_->cache.lookup(bytes, hash, out)) return;
    const std::size_t first = out.size();
    merge_piece(bytes, out);
    impl_->cache.insert(bytes, hash, std::span<const std::int32_t>(out).subspan(first));
}

namespace {
thread_local MergeScratch merge_scratch;
}  // namespace

// The piece's symbols before any merge, linked in order, into merge_scratch.symbols.
void BpeModel::push_initial_symbols(std::string_view bytes) const {
    auto& symbols = merge_scratch.symbols;
    const auto push = [&](std::int32_t id) {
        const auto i = static_cast<std::int32_t>(symbols.size());
        if (i > 0) symbols.back().next = i;
        symbols.push_back({id, i - 1, -1});
    };
    if (!impl_->options.char_symbols) {
        for (const char c : bytes) push(impl_->byte_ids[static_cast<unsigned char>(c)]);
        return;
    }
    const BpeOptions& o = impl_->options;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    bool last_unk = false;
    for (std::size_t i = 0; i < bytes.size();) {
        const Utf8Step st = utf8_step(p + i, bytes.size() - i);
        const std::size_t len = st.kind == Utf8Kind::kValid ? st.length : 1;
        const std::string_view ch = bytes.substr(i, len);
        i += len;
        if (const auto it = impl_->vocab.find(ch); it != impl_->vocab.end()) {
            push(it->second);
            last_unk = false;
            continue;
        }
        if (o.byte_fallback) {
            bool all = true;
            for (const char c : ch) all = all && impl_->fallback_ids[static_cast<unsigned char>(c)] >= 0;
            if (all) {
                for (const char c : ch) push(impl_->fallback_ids[static_cast<unsigned char>(c)]);
                last_unk = false;
                continue;
            }
        }
        if (o.unk_id >= 0 && !(o.fuse_unk && last_unk)) push(o.unk_id);
        last_unk = o.unk_id >= 0;
    }
}

void BpeModel::merge_piece(std::string_view bytes, std::vector<std::int32_t>& out) const {
    MergeScratch& scratch = merge_scratch;
    auto& symbols = scratch.symbols;
    auto& heap = scratch.heap;
    symbols.clear();
    heap.clear();
    push_initial_symbols(bytes);
    const auto n = static_cast<std::int32_t>(symbols.size());
    if (n == 0) return;
    const MergeTable& merges = impl_->merges;
    auto push_candidate = [&](std::int32_t pos) {
        const std::int32_t next = symbols[pos].next;
        if (next < 0 || symbols[pos].id < 0 || symbols[next].id < 0) return;
        if (const MergeTable::Merge* m = merges.find(symbols[pos].id, symbols[next].id)) {
            heap.push_back({m->rank, pos, m->new_id});
            std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
        }
    };
    for (std::int32_t i = 0; i + 1 < n; ++i) push_candidate(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
        const MergeScratch::Candidate top = heap.back();
        heap.pop_back();
        MergeScratch::Symbol& left = symbols[top.pos];
        // Stale entry: the left symbol was absorbed (id -2) or one side changed since the
        // push; a changed pair always merges to a different id, so the id check suffices.
        if (left.id < 0 || left.next < 0) continue;
        const MergeTable::Merge* m = merges.find(left.id, symbols[left.next].id);
        if (m == nullptr || m->new_id != top.new_id) continue;
        MergeScratch::Symbol& right = symbols[left.next];
        left.id = top.new_id;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.pos;
        right.id = -2;
        if (left.prev >= 0) push_candidate(left.prev);
        push_candidate(top.pos);
    }
    for (std::int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) {
        if (symbols[i].id >= 0) out.push_back(symbols[i].id);
    }
}

}  // namespace tessera::tokenizer
