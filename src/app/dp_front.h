#pragma once
// app/dp_front.h — the one HTTP front of a `--dp-size N` launch, as SGLang's
// DataParallelController (managers/data_parallel_controller.py) is for its replicas or
// DP-attention groups: every scheduler's leader (a replica's, or an attention-DP group's)
// serves its own engine on a port of its own and notes the URL at the rendezvous store;
// scheduler 0's leader (on node 0) then starts a gateway::Gateway on --host / --port over all
// of them, with --load-balance-method as its policy. Setup only.

#include <memory>

#include "app/rank_runtime.h"
#include "base/status.h"
#include "gateway/gateway.h"
#include "server/server_args.h"
#include "tokenizer/tokenizer.h"

namespace tessera::app {

// Notes this scheduler's engine URL (http://`replica_host`:`replica_port`) at the store; on
// scheduler 0 also waits for every other one's and returns the started front (null
// elsewhere), which counts prompt tokens with `tokenizer` (it must outlive the front; null
// under --skip-tokenizer-init: the front estimates them).
StatusOr<std::unique_ptr<gateway::Gateway>> start_dp_front(const server::ServerArgs& args, const RankRuntime& rt,
                                                           const std::string& replica_host, int replica_port,
                                                           const tokenizer::Tokenizer* tokenizer);

}  // namespace tessera::app
