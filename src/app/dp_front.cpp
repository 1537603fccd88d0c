#include "app/dp_front.h"

#include "base/logging.h"

namespace tessera::app {

namespace {

std::string url_key(int replica) { return "dp/replica_url/" + std::to_string(replica); }

}  // namespace

StatusOr<std::unique_ptr<gateway::Gateway>> start_dp_front(const server::ServerArgs& args, const RankRuntime& rt,
                                                           const std::string& replica_host, int replica_port,
                                                           const tokenizer::Tokenizer* tokenizer) {
    const std::string url = "http://" + replica_host + ":" + std::to_string(replica_port);
    TSR_RETURN_IF_ERROR(rt.store->set(url_key(rt.scheduler_index()), std::vector<std::uint8_t>(url.begin(), url.end())));
    if (rt.scheduler_index() != 0) return std::unique_ptr<gateway::Gateway>();

    gateway::GatewayOptions o;
    const auto timeout = args.dist_timeout ? std::chrono::milliseconds(*args.dist_timeout * 1000)
                                           : std::chrono::milliseconds(dist::Store::kDefaultTimeout);
    const char* unit = rt.layout.attn_dp_size() > 1 ? "DP-attention group " : "DP replica ";
    for (int r = 0; r < rt.layout.n_schedulers(); ++r) {
        auto got = rt.store->get(url_key(r), timeout);
        if (!got.ok())
            return Status(got.status().code(), unit + std::to_string(r) + " did not start its engine: " +
                                                   got.status().message());
        o.worker_urls.emplace_back(got->begin(), got->end());
    }
    o.host = args.host;
    o.port = args.port;
    TSR_ASSIGN_OR_RETURN(o.policy, gateway::parse_policy(args.load_balance_method));
    o.replicas = true;
    o.expert_record_first_worker_only = rt.layout.attn_dp_size() > 1;
    // total_tokens compares prompt lengths in tokens, as SGLang's DP controller does; the
    // other methods do not need them, so they skip the tokenization.
    if (o.policy == gateway::PolicyKind::kTotalTokens && tokenizer) {
        o.count_tokens = [tokenizer](std::string_view text) {
            return static_cast<std::int64_t>(tokenizer->encode(text, /*add_special_tokens=*/false).size());
        };
    }
    o.api_key = args.effective_api_key();
    o.admin_api_key = args.admin_api_key;
    o.allowed_hosts = args.allowed_host_list();
    // A short check interval shows a stalled replica at the front quickly; a replica whose
    // rank dies stops the whole launch anyway (the launcher watches every rank).
    o.health.interval = std::chrono::milliseconds(5'000);
    o.health.timeout = std::chrono::milliseconds(5'000);
    o.load_poll_interval = std::chrono::milliseconds(500);
    o.seed = args.random_seed ? static_cast<std::uint64_t>(*args.random_seed) : 0;
    auto front = std::make_unique<gateway::Gateway>(o);
    TSR_RETURN_IF_ERROR(front->start());
    TSR_LOG(INFO, "DP front on http://{}:{}: {} {}, --load-balance-method {}", args.host, front->port(),
            o.worker_urls.size(), rt.layout.attn_dp_size() > 1 ? "DP-attention groups" : "replicas",
            args.load_balance_method);
    return front;
}

}  // namespace tessera::app
