#pragma once
// app/commands.h — the subcommands of the `tessera` binary. main.cpp parses the flags into
// these option structs; each command returns the process exit code.

#include <cstdint>
#include <optional>
#include <string>

#include "server/server_args.h"

namespace tessera::app {

struct GenerateCommandOptions {
    server::ServerArgs server;  // model, dtype, threads and the parallel/scheduling flags
    std::string prompt_ids;  // "1,2,3"
    std::string prompt;      // text, encoded with the model's tokenizer
    bool chat = false;       // render `prompt` as a user message with the chat template
    std::int64_t max_new_tokens = 16;
    float temperature = 0.0f;
    int top_k = -1;
    float top_p = 1.0f;
    float min_p = 0.0f;
    std::uint64_t seed = 0;
    bool ignore_eos = false;
    bool json = false;
    std::string logits_out;  // .npy path, f32 [rows, vocab]
};

// `internal_rank` / `internal_store`: set in a rank process started by the launcher.
int run_generate(const GenerateCommandOptions& options, std::optional<int> internal_rank = std::nullopt,
                 const std::string& internal_store = "");

struct TokenizeCommandOptions {
    std::string model_path;
    bool add_special_tokens = false;
    bool decode = false;
    bool skip_special_tokens = false;
    bool chat = false;
};

int run_tokenize(const TokenizeCommandOptions& options);

// `tessera eplb`: expert placements for recorded loads, JSON lines on stdin/stdout.
int run_eplb();

// `tessera plan` (argv[0] is "plan").
int run_plan(int argc, char** argv);

// The plan's checks for a launch on this host, before any weight is read: fails when a rank
// could not start (its memory, its shard), naming the fix; logs the rest as warnings.
Status preflight_check(const server::ServerArgs& args);

// `tessera checksum`: prints the SHA-256 manifest of a model folder that --model-checksum reads.
int run_checksum(const std::string& model_path);

// --model-checksum: the model files against their manifest, before any weight is read (once
// per node, by the process that launches its ranks). Ok without the flag.
Status verify_model_checksum(const server::ServerArgs& args);

// `tessera gateway` (argv[0] is "gateway").
int run_gateway(int argc, char** argv);

// `tessera bench serve|one-batch` (argv[0] is "bench").
int run_bench(int argc, char** argv);

// `tessera serve` (as one rank process when internal_rank is set).
int run_serve(const server::ServerArgs& args, std::optional<int> internal_rank = std::nullopt,
              const std::string& internal_store = "");

}  // namespace tessera::app
