#pragma once
// app/launcher.h — starts this node's rank processes and supervises them, as SGLang's
// engine does: one process per local rank (re-executing this binary with the same flags
// plus --internal-rank), the rendezvous store served by node 0 at --dist-init-addr, logs
// on the shared stderr with a rank prefix, and teardown of every local rank when one fails
// or when the launcher gets SIGINT / SIGTERM. Used from the main thread only.

#include <string>
#include <vector>

#include "base/status.h"
#include "dist/parallel_layout.h"

namespace tessera::app {

struct LaunchOptions {
    std::vector<std::string> argv;  // the launcher's own command line, re-used for the ranks
    std::string dist_init_addr;     // HOST:PORT; empty on one node: a free loopback port
    int nnodes = 1;
    int node_rank = 0;
    int http_port = 0;  // serve's --port: a store on a free port must not take it (0: none)
};

// Runs every rank of `layout` placed on options.node_rank to completion. Returns 0 when all
// exit 0; otherwise the first failing rank's exit code (1 when it died from a signal), after
// terminating the others.
int launch_local_ranks(const dist::ParallelLayout& layout, const LaunchOptions& options);

// The job's rendezvous token (dist::TcpStoreOptions::token), handed to the rank processes in
// TESSERA_JOB_TOKEN: that variable when it is already set (give every node the same secret);
// else a random one for a one-node job, and for several nodes one derived from the launch
// command without --node-rank (the same on every node; it keeps strangers and other jobs
// out, but only a secret keeps out someone who knows the command).
std::string job_token(const LaunchOptions& options);

// HOST:PORT split; errors name the flag.
StatusOr<std::pair<std::string, int>> parse_host_port(const std::string& text, const char* flag);

}  // namespace tessera::app
