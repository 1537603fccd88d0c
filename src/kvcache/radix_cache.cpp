// kvcache/radix_cache.cpp — RadixCache: the PrefixCache behind the default (radix cache on)
// configuration. A radix tree whose edges are token runs (whole pages when page_size > 1)
// and whose values are the KV slots of those tokens. Owned by the scheduler thread.
//
// Invariants:
//   * every non-root node has a non-empty key, a multiple of page_size long, and
//     value.size() == key.size(); children are keyed by their first page of tokens;
//   * lock_ref of a node >= lock_ref of each child (locks are taken on whole root paths);
//     so is session_ref (session references, also on root paths; a leaf that is evicted
//     takes its references off its ancestors);
//   * evictable_ + protected_ == Σ key lengths; a node counts as protected iff lock_ref > 0.
// Eviction order, hit counts and priorities follow SGLang's radix_cache.py (_insert_helper,
// _split_node, evict) and mem_cache/evict_policy.py.

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>

#include "base/check.h"
#include "kvcache/kv_pool.h"
#include "kvcache/prefix_cache.h"

namespace tessera::kvcache {
namespace {

using Page = std::vector<std::int32_t>;  // the first page_size tokens of an edge

struct Node {
    NodeId id = 0;
    Node* parent = nullptr;
    std::vector<std::int32_t> key;    // I32 [edge_len] tokens of the edge into this node
    std::vector<std::int32_t> value;  // I32 [edge_len] their KV slots
    std::map<Page, Node*> children;
    std::int64_t lock_ref = 0;
    std::int64_t session_ref = 0;
    std::uint64_t last_access = 0;  // logical clock: deterministic LRU order
    std::int64_t hit_count = 0;     // inserts through this node, chunks of a prompt aside
    std::int64_t priority = 0;      // the highest priority of a request that inserted through it
};

// SGLang's SLRUStrategy: a node inserted through this often is in the protected segment.
constexpr std::int64_t kSlruProtectedHits = 2;

// A leaf's place in the eviction order (smaller first): unreferenced by a session before
// referenced, then the policy's key, then the id, so the order never depends on hash-map
// iteration.
using EvictionKey = std::tuple<bool, std::int64_t, std::uint64_t, NodeId>;

EvictionKey eviction_key(const Node& n, EvictionPolicy policy) {
    std::int64_t first = 0;
    switch (policy) {
        case EvictionPolicy::kLru: break;
        case EvictionPolicy::kLfu: first = n.hit_count; break;
        case EvictionPolicy::kSlru: first = n.hit_count >= kSlruProtectedHits ? 1 : 0; break;
        case EvictionPolicy::kPriority: first = n.priority; break;
    }
    return {n.session_ref > 0, first, n.last_access, n.id};
}

class RadixCache final : public PrefixCache {
 public:
    RadixCache(SlotAllocator& allocator, std::int64_t page_size, EvictionPolicy policy)
        : allocator_(allocator), page_size_(page_size), policy_(policy) {
        TSR_CHECK(page_size >= 1) << "page_size " << page_size;
        init_root();
    }

    // ---- PrefixCache ----------------------------------------------------------------------
    MatchResult match_prefix(std::span<const std::int32_t> tokens) override;
    NodeId insert(std::span<const std::int32_t> tokens, std::span<const std::int32_t> slots,
                  const InsertOptions& options) override;
    void inc_lock_ref(NodeId node) override;
    void dec_lock_ref(NodeId node) override;
    void inc_session_ref(NodeId node) override;
    void dec_session_ref(NodeId node) override;
    std::int64_t evict(std::int64_t n_tokens) override;
    std::int64_t evictable_size() const override { return evictable_; }
    std::int64_t protected_size() const override { return protected_; }
    std::int64_t total_size() const override { return evictable_ + protected_; }
    bool reset() override;

 private:
    void init_root();
    std::int64_t aligned(std::size_t n) const {
        return static_cast<std::int64_t>(n) / page_size_ * page_size_;
    }
    Page page_at(std::span<const std::int32_t> tokens, std::int64_t pos) const {
        return Page(tokens.begin() + pos, tokens.begin() + pos + page_size_);
    }
    // Length of the common prefix of a node's key and `tokens`, in whole pages.
    std::int64_t common_len(const Node& node, std::span<const std::int32_t> tokens) const;
    Node* find_child(Node* node, std::span<const std::int32_t> tokens, std::int64_t pos) const;
    // Cuts `child`'s edge after `len` tokens; returns the new node holding the first part.
    Node* split(Node* child, std::int64_t len);
    Node* node_of(NodeId id) const;
    void erase_leaf(Node* leaf);
    // An insert passing through `node`.
    static void record_insert(Node* node, const InsertOptions& options) {
        node->priority = std::max(node->priority, options.priority);
        if (!options.chunked) ++node->hit_count;
    }

    SlotAllocator& allocator_;
    const std::int64_t page_size_;
    const EvictionPolicy policy_;
    std::unordered_map<NodeId, std::unique_ptr<Node>> nodes_;
    Node* root_ = nullptr;
    NodeId next_id_ = 0;
    std::uint64_t clock_ = 0;
    std::int64_t evictable_ = 0;
    std::int64_t protected_ = 0;
};

void RadixCache::init_root() {
    nodes_.clear();
    next_id_ = 0;
    auto root = std::make_unique<Node>();
    root->id = next_id_++;
    root->lock_ref = 1;  // the root is never evicted
    root_ = root.get();
    nodes_.emplace(root->id, std::move(root));
    evictable_ = 0;
    protected_ = 0;
}

Node* RadixCache::node_of(NodeId id) const {
    auto it = nodes_.find(id);
    TSR_CHECK(it != nodes_.end()) << "unknown radix node " << id << " (evicted while in use?)";
    return it->second.get();
}

std::int64_t RadixCache::common_len(const Node& node, std::span<const std::int32_t> tokens) const {
    const auto n = std::min(static_cast<std::int64_t>(node.key.size()),
                            static_cast<std::int64_t>(tokens.size()));
    std::int64_t i = 0;
    while (i < n && node.key[i] == tokens[i]) ++i;
    return i / page_size_ * page_size_;  // a partially matching page does not count
}

Node* RadixCache::find_child(Node* node, std::span<const std::int32_t> tokens,
                             std::int64_t pos) const {
    auto it = node->children.find(page_at(tokens, pos));
    return it == node->children.end() ? nullptr : it->second;
}

Node* RadixCache::split(Node* child, std::int64_t len) {
    TSR_CHECK(len > 0 && len < static_cast<std::int64_t>(child->key.size()));
    auto owned = std::make_unique<Node>();
    Node* mid = owned.get();
    mid->id = next_id_++;
    mid->parent = child->parent;
    mid->key.assign(child->key.begin(), child->key.begin() + len);
    mid->value.assign(child->value.begin(), child->value.begin() + len);
    // The new parent inherits the child's locks: every lock on the child is a lock on its
    // root path, which now runs through `mid`. Size counters are unchanged.
    mid->lock_ref = child->lock_ref;
    mid->session_ref = child->session_ref;
    mid->last_access = child->last_access;
    mid->hit_count = child->hit_count;
    mid->priority = child->priority;
    child->key.erase(child->key.begin(), child->key.begin() + len);
    child->value.erase(child->value.begin(), child->value.begin() + len);
    child->parent = mid;
    mid->children.emplace(Page(child->key.begin(), child->key.begin() + page_size_), child);
    mid->parent->children[Page(mid->key.begin(), mid->key.begin() + page_size_)] = mid;
    nodes_.emplace(mid->id, std::move(owned));
    return mid;
}

MatchResult RadixCache::match_prefix(std::span<const std::int32_t> tokens) {
    MatchResult result;
    const std::int64_t n = aligned(tokens.size());
    const std::uint64_t now = ++clock_;
    Node* node = root_;
    std::int64_t pos = 0;
    while (pos < n) {
        Node* child = find_child(node, tokens, pos);
        if (child == nullptr) break;
        child->last_access = now;
        const auto rest = tokens.subspan(static_cast<std::size_t>(pos),
                                         static_cast<std::size_t>(n - pos));
        const std::int64_t len = common_len(*child, rest);
        const bool partial = len < static_cast<std::int64_t>(child->key.size());
        // Splitting on a partial match makes the returned node end exactly at the prefix,
        // so locking it protects exactly the matched tokens.
        if (partial) child = split(child, len);
        result.slots.insert(result.slots.end(), child->value.begin(), child->value.end());
        node = child;
        pos += len;
        if (partial) break;
    }
    result.last_node = node->id;
    return result;
}

NodeId RadixCache::insert(std::span<const std::int32_t> tokens, std::span<const std::int32_t> slots,
                          const InsertOptions& options) {
    TSR_CHECK_EQ(tokens.size(), slots.size());
    // Only whole pages are cached; the caller keeps (and frees) a trailing partial page.
    const std::int64_t n = aligned(tokens.size());
    const std::uint64_t now = ++clock_;
    Node* node = root_;
    std::int64_t pos = 0;
    std::vector<std::int32_t> duplicates;
    while (pos < n) {
        Node* child = find_child(node, tokens, pos);
        if (child == nullptr) {
            auto owned = std::make_unique<Node>();
            Node* leaf = owned.get();
            leaf->id = next_id_++;
            leaf->parent = node;
            leaf->key.assign(tokens.begin() + pos, tokens.begin() + n);
            leaf->value.assign(slots.begin() + pos, slots.begin() + n);
            leaf->last_access = now;
            leaf->priority = options.priority;
            record_insert(leaf, options);
            node->children.emplace(page_at(tokens, pos), leaf);
            nodes_.emplace(leaf->id, std::move(owned));
            evictable_ += n - pos;
            node = leaf;
            break;
        }
        child->last_access = now;
        const auto rest = tokens.subspan(static_cast<std::size_t>(pos),
                                         static_cast<std::size_t>(n - pos));
        const std::int64_t len = common_len(*child, rest);
        // These tokens are already cached: the tree keeps its slots. The caller's slots for
        // them are returned unless they are the tree's own (a prefix it matched earlier).
        for (std::int64_t i = 0; i < len; ++i) {
            if (slots[pos + i] != child->value[i]) duplicates.push_back(slots[pos + i]);
        }
        if (len < static_cast<std::int64_t>(child->key.size())) child = split(child, len);
        record_insert(child, options);
        node = child;
        pos += len;
    }
    if (!duplicates.empty()) allocator_.free(duplicates);
    return node->id;
}

void RadixCache::inc_lock_ref(NodeId id) {
    for (Node* node = node_of(id); node != root_; node = node->parent) {
        if (node->lock_ref++ == 0) {
            const auto len = static_cast<std::int64_t>(node->key.size());
            evictable_ -= len;
            protected_ += len;
        }
    }
}

void RadixCache::dec_lock_ref(NodeId id) {
    for (Node* node = node_of(id); node != root_; node = node->parent) {
        TSR_CHECK(node->lock_ref > 0) << "unbalanced dec_lock_ref on radix node " << node->id;
        if (--node->lock_ref == 0) {
            const auto len = static_cast<std::int64_t>(node->key.size());
            evictable_ += len;
            protected_ -= len;
        }
    }
}

void RadixCache::inc_session_ref(NodeId id) {
    for (Node* node = node_of(id); node != root_; node = node->parent) ++node->session_ref;
}

void RadixCache::dec_session_ref(NodeId id) {
    const auto it = nodes_.find(id);
    if (it == nodes_.end()) return;  // evicted: its references left its root path with it
    for (Node* node = it->second.get(); node != root_; node = node->parent) {
        TSR_CHECK(node->session_ref > 0) << "unbalanced dec_session_ref on radix node " << node->id;
        --node->session_ref;
    }
}

void RadixCache::erase_leaf(Node* leaf) {
    for (Node* node = leaf->parent; leaf->session_ref > 0 && node != root_; node = node->parent)
        node->session_ref -= leaf->session_ref;
    allocator_.free(leaf->value);
    evictable_ -= static_cast<std::int64_t>(leaf->key.size());
    leaf->parent->children.erase(Page(leaf->key.begin(), leaf->key.begin() + page_size_));
    nodes_.erase(leaf->id);
}

std::int64_t RadixCache::evict(std::int64_t n_tokens) {
    std::priority_queue<EvictionKey, std::vector<EvictionKey>, std::greater<>> heap;
    const auto entry = [this](const Node& n) { return eviction_key(n, policy_); };
    for (const auto& [id, node] : nodes_) {
        if (node.get() != root_ && node->children.empty() && node->lock_ref == 0) heap.push(entry(*node));
    }
    std::int64_t freed = 0;
    while (freed < n_tokens && !heap.empty()) {
        Node* leaf = node_of(std::get<3>(heap.top()));
        heap.pop();
        Node* parent = leaf->parent;
        freed += static_cast<std::int64_t>(leaf->key.size());
        erase_leaf(leaf);
        if (parent != root_ && parent->children.empty() && parent->lock_ref == 0) heap.push(entry(*parent));
    }
    return freed;
}

bool RadixCache::reset() {
    if (protected_ > 0) return false;
    for (const auto& [id, node] : nodes_) {
        if (node.get() != root_) allocator_.free(node->value);
    }
    init_root();
    return true;
}

}  // namespace

StatusOr<EvictionPolicy> parse_eviction_policy(std::string_view name) {
    std::string lowered(name);
    for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lowered == "lru") return EvictionPolicy::kLru;
    if (lowered == "lfu") return EvictionPolicy::kLfu;
    if (lowered == "slru") return EvictionPolicy::kSlru;
    if (lowered == "priority") return EvictionPolicy::kPriority;
    return Status::InvalidArgument("--radix-eviction-policy " + std::string(name) +
                                   " is not a policy; use lru, lfu, slru or priority");
}

std::unique_ptr<PrefixCache> make_radix_cache(SlotAllocator& allocator, std::int64_t page_size,
                                              EvictionPolicy policy) {
    return std::make_unique<RadixCache>(allocator, page_size, policy);
}

}  // namespace tessera::kvcache
