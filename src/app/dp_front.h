#pragma once
// app/dp_front.h — the one HTTP front of a `--dp-size N` launch (plain DP, no DP-attention),
// as SGLang's DataParallelController (managers/data_parallel_controller.py) is for its
// replicas: every replica's leader serves its own engine on a port of its own and notes the
// URL at the rendezvous store; replica 0's leader (on node 0) then starts a gateway::Gateway
// on --host / --port over all of them, with --load-balance-method as its policy. Setup only.

#include <memory>

#include "app/rank_runtime.h"
#include "base/status.h"
#include "gateway/gateway.h"
#include "server/server_args.h"
#include "tokenizer/tokenizer.h"

namespace tessera::app {

// Notes this replica's engine URL (http://`replica_host`:`replica_port`) at the store; on
// replica 0 also waits for every other replica's and returns the started front (null
// elsewhere), which counts prompt tokens with `tokenizer` (it must outlive the front).
StatusOr<std::unique_ptr<gateway::Gateway>> start_dp_front(const server::ServerArgs& args, const RankRuntime& rt,
                                                           const std::string& replica_host, int replica_port,
                                                           const tokenizer::Tokenizer& tokenizer);

}  // namespace tessera::app
