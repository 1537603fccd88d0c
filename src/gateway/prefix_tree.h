#pragma once
// gateway/prefix_tree.h — the cache-aware policy's approximate picture of what each worker
// has cached: a radix tree over the bytes of the request texts routed so far, each node
// marked with the workers ("tenants") that were sent a text through it and when. As
// sgl-model-gateway's policies/tree.rs: no tokenization (the gateway never sees tokens), and
// eviction of each tenant's least recently used leaves so its share stays under a budget.
// Not thread-safe: the gateway guards it with its routing lock.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::gateway {

class PrefixTree {
 public:
    PrefixTree();
    ~PrefixTree();
    PrefixTree(const PrefixTree&) = delete;
    PrefixTree& operator=(const PrefixTree&) = delete;

    // Marks every byte of `text` as cached on `tenant`, now.
    void insert(std::string_view text, const std::string& tenant);

    struct Match {
        std::size_t matched = 0;  // bytes of the text's longest prefix some allowed tenant has
        std::string tenant;       // that tenant (the most recently used one at the deepest node)
    };
    // The longest prefix of `text` held by a tenant that `allowed` accepts (all when empty).
    Match prefix_match(std::string_view text,
                       const std::function<bool(const std::string&)>& allowed = {}) const;

    // Removes `tenant` from the tree (a worker left the gateway).
    void remove_tenant(const std::string& tenant);
    // Drops each tenant's least recently used leaves until it holds at most `max_bytes`.
    void evict(std::size_t max_bytes);

    // Bytes of text held per tenant (shared prefixes count once per tenant).
    std::size_t tenant_bytes(const std::string& tenant) const;
    std::size_t node_count() const;

 private:
    struct Node;
    void drop_tenant_at(Node* node, const std::string& tenant);

    std::unique_ptr<Node> root_;
    std::unordered_map<std::string, std::size_t> tenant_bytes_;
    std::uint64_t clock_ = 0;  // logical time of the last insert (LRU order)
};

}  // namespace tessera::gateway
