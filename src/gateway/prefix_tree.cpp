#include "gateway/prefix_tree.h"

#include <algorithm>
#include <map>
#include <queue>

namespace tessera::gateway {

struct PrefixTree::Node {
    std::string edge;  // the bytes from the parent to this node
    Node* parent = nullptr;
    std::map<unsigned char, std::unique_ptr<Node>> children;
    std::unordered_map<std::string, std::uint64_t> tenants;  // tenant → last use

    bool child_has(const std::string& tenant) const {
        for (const auto& [byte, child] : children)
            if (child->tenants.count(tenant) != 0) return true;
        return false;
    }
};

namespace {

std::size_t common_prefix(std::string_view a, std::string_view b) {
    const std::size_t n = std::min(a.size(), b.size());
    std::size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

}  // namespace

PrefixTree::PrefixTree() : root_(std::make_unique<Node>()) {}
PrefixTree::~PrefixTree() = default;

void PrefixTree::insert(std::string_view text, const std::string& tenant) {
    const std::uint64_t now = ++clock_;
    Node* node = root_.get();
    node->tenants[tenant] = now;
    while (!text.empty()) {
        const auto byte = static_cast<unsigned char>(text.front());
        auto it = node->children.find(byte);
        if (it == node->children.end()) {
            auto leaf = std::make_unique<Node>();
            leaf->edge = std::string(text);
            leaf->parent = node;
            leaf->tenants[tenant] = now;
            tenant_bytes_[tenant] += leaf->edge.size();
            node->children.emplace(byte, std::move(leaf));
            return;
        }
        Node* child = it->second.get();
        const std::size_t l = common_prefix(text, child->edge);
        if (l < child->edge.size()) {
            // Split the edge at l: a middle node that holds what the child held.
            auto middle = std::make_unique<Node>();
            middle->edge = child->edge.substr(0, l);
            middle->parent = node;
            middle->tenants = child->tenants;
            std::unique_ptr<Node> lower = std::move(it->second);
            lower->edge.erase(0, l);
            lower->parent = middle.get();
            middle->children.emplace(static_cast<unsigned char>(lower->edge.front()), std::move(lower));
            it->second = std::move(middle);
            child = it->second.get();
        }
        if (child->tenants.count(tenant) == 0) tenant_bytes_[tenant] += child->edge.size();
        child->tenants[tenant] = now;
        node = child;
        text.remove_prefix(l);
    }
}

PrefixTree::Match PrefixTree::prefix_match(std::string_view text,
                                           const std::function<bool(const std::string&)>& allowed) const {
    auto best_tenant = [&allowed](const Node& n) -> const std::string* {
        const std::string* best = nullptr;
        std::uint64_t best_time = 0;
        for (const auto& [tenant, time] : n.tenants) {
            if (allowed && !allowed(tenant)) continue;
            if (best == nullptr || time > best_time || (time == best_time && tenant < *best)) {
                best = &tenant;
                best_time = time;
            }
        }
        return best;
    };
    Match m;
    const Node* node = root_.get();
    while (!text.empty()) {
        auto it = node->children.find(static_cast<unsigned char>(text.front()));
        if (it == node->children.end()) break;
        const Node* child = it->second.get();
        const std::string* tenant = best_tenant(*child);
        if (tenant == nullptr) break;
        const std::size_t l = common_prefix(text, child->edge);
        m.matched += l;
        m.tenant = *tenant;
        if (l < child->edge.size()) break;
        text.remove_prefix(l);
        node = child;
    }
    return m;
}

void PrefixTree::drop_tenant_at(Node* node, const std::string& tenant) {
    if (node->tenants.erase(tenant) == 0) return;
    auto& bytes = tenant_bytes_[tenant];
    bytes -= std::min(bytes, node->edge.size());
    // A node nobody holds any more goes, once its children have gone.
    while (node != root_.get() && node->tenants.empty() && node->children.empty()) {
        Node* parent = node->parent;
        parent->children.erase(static_cast<unsigned char>(node->edge.front()));
        node = parent;
    }
}

void PrefixTree::remove_tenant(const std::string& tenant) {
    // Leaves first (post-order), so pruning never frees a node still to be visited.
    std::vector<Node*> order;
    std::vector<Node*> stack{root_.get()};
    while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        order.push_back(n);
        for (auto& [byte, child] : n->children) stack.push_back(child.get());
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        Node* n = *it;
        if (n == root_.get()) {
            n->tenants.erase(tenant);
        } else if (n->tenants.count(tenant) != 0 && !n->child_has(tenant)) {
            drop_tenant_at(n, tenant);
        }
    }
    tenant_bytes_.erase(tenant);
}

void PrefixTree::evict(std::size_t max_bytes) {
    std::vector<std::string> over;
    for (const auto& [tenant, bytes] : tenant_bytes_)
        if (bytes > max_bytes) over.push_back(tenant);
    for (const std::string& tenant : over) {
        // The tenant's leaves, oldest first; a parent becomes a leaf when its last child goes.
        using Entry = std::pair<std::uint64_t, Node*>;
        std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
        std::vector<Node*> stack{root_.get()};
        while (!stack.empty()) {
            Node* n = stack.back();
            stack.pop_back();
            for (auto& [byte, child] : n->children) {
                auto t = child->tenants.find(tenant);
                if (t == child->tenants.end()) continue;
                if (child->child_has(tenant)) {
                    stack.push_back(child.get());
                } else {
                    leaves.emplace(t->second, child.get());
                }
            }
        }
        while (tenant_bytes_[tenant] > max_bytes && !leaves.empty()) {
            Node* leaf = leaves.top().second;
            leaves.pop();
            Node* parent = leaf->parent;
            drop_tenant_at(leaf, tenant);  // may free `leaf`
            if (parent != root_.get() && parent->tenants.count(tenant) != 0 && !parent->child_has(tenant))
                leaves.emplace(parent->tenants[tenant], parent);
        }
    }
}

std::size_t PrefixTree::tenant_bytes(const std::string& tenant) const {
    auto it = tenant_bytes_.find(tenant);
    return it == tenant_bytes_.end() ? 0 : it->second;
}

std::size_t PrefixTree::node_count() const {
    std::size_t n = 0;
    std::vector<const Node*> stack{root_.get()};
    while (!stack.empty()) {
        const Node* node = stack.back();
        stack.pop_back();
        ++n;
        for (const auto& [byte, child] : node->children) stack.push_back(child.get());
    }
    return n;
}

}  // namespace tessera::gateway
