// dist/process_group_hybrid.cpp — see make_hybrid_group in process_group.h.

#include <fmt/core.h>

#include "dist/process_group.h"

namespace tessera::dist {

namespace {

class ProcessGroupHybrid final : public ProcessGroup {
 public:
    ProcessGroupHybrid(std::unique_ptr<ProcessGroup> all, std::unique_ptr<ProcessGroup> local,
                       std::vector<int> local_rank)
        : ProcessGroup(all->name(), all->rank(), all->size()),
          all_(std::move(all)),
          local_(std::move(local)),
          local_rank_(std::move(local_rank)) {}

    std::string backend_name() const override { return all_->backend_name() + "+" + local_->backend_name(); }

    using ProcessGroup::all_reduce;  // the integer overloads
    Status all_reduce(std::span<float> data, ReduceOp op) override { return all_->all_reduce(data, op); }
    Status all_gather(std::span<const float> in, std::span<float> out) override { return all_->all_gather(in, out); }
    Status reduce_scatter(std::span<const float> in, std::span<float> out, ReduceOp op) override {
        return all_->reduce_scatter(in, out, op);
    }
    Status all_to_all_v(std::span<const std::uint8_t> send, std::span<const std::int64_t> send_counts,
                        std::span<std::uint8_t> recv, std::span<const std::int64_t> recv_counts) override {
        return all_->all_to_all_v(send, send_counts, recv, recv_counts);
    }
    Status broadcast(std::span<std::uint8_t> data, int root) override { return all_->broadcast(data, root); }
    Status barrier() override { return all_->barrier(); }

    StatusOr<std::shared_ptr<Work>> isend(std::span<const std::uint8_t> data, int dst, int tag) override {
        TSR_RETURN_IF_ERROR(check_rank(dst, "isend", "dst"));
        const int local = local_rank_[static_cast<std::size_t>(dst)];
        return local >= 0 ? local_->isend(data, local, tag) : all_->isend(data, dst, tag);
    }
    StatusOr<std::shared_ptr<Work>> irecv(std::span<std::uint8_t> data, int src, int tag) override {
        TSR_RETURN_IF_ERROR(check_rank(src, "irecv", "src"));
        const int local = local_rank_[static_cast<std::size_t>(src)];
        return local >= 0 ? local_->irecv(data, local, tag) : all_->irecv(data, src, tag);
    }

 private:
    std::unique_ptr<ProcessGroup> all_;
    std::unique_ptr<ProcessGroup> local_;
    std::vector<int> local_rank_;
};

}  // namespace

StatusOr<std::unique_ptr<ProcessGroup>> make_hybrid_group(std::unique_ptr<ProcessGroup> all,
                                                          std::unique_ptr<ProcessGroup> local,
                                                          std::vector<int> local_rank) {
    if (static_cast<int>(local_rank.size()) != all->size() || local_rank[static_cast<std::size_t>(all->rank())] != local->rank()) {
        return Status::InvalidArgument(fmt::format(
            "hybrid group '{}': {} local ranks for {} members, this rank {} local {} (expected {})", all->name(),
            local_rank.size(), all->size(), all->rank(),
            all->rank() < static_cast<int>(local_rank.size()) ? local_rank[static_cast<std::size_t>(all->rank())] : -1,
            local->rank()));
    }
    return std::unique_ptr<ProcessGroup>(
        std::make_unique<ProcessGroupHybrid>(std::move(all), std::move(local), std::move(local_rank)));
}

}  // namespace tessera::dist
