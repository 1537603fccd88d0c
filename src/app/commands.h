#pragma once
// app/commands.h — the subcommands of the `tessera` binary. main.cpp parses the flags into
// these option structs; each command returns the process exit code.

#include <cstdint>
#include <string>

#include "server/server_args.h"

namespace tessera::app {

struct GenerateCommandOptions {
    server::ServerArgs server;  // model, dtype, threads and the parallel/scheduling flags
    std::string prompt_ids;  // "1,2,3"
    std::string prompt;      // text: needs the tokenizer (not built yet)
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

int run_generate(const GenerateCommandOptions& options);

}  // namespace tessera::app
