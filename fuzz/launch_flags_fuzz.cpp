// libFuzzer target: bytes → a launch command line (arguments split at newlines) read as
// `tessera serve` reads it: argparse prefixes, SGLang's flag catalogue and rules, and the
// same bytes as a `--config` YAML file. Whatever the input, reading ends in a value or an
// error, never a crash, a hang or a leak.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "server/config_file.h"
#include "server/server_args.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> args;
    std::string arg;
    for (char c : text) {
        if (c == '\n') {
            args.push_back(arg);
            arg.clear();
        } else {
            arg += c;
        }
    }
    if (!arg.empty()) args.push_back(arg);

    tessera::server::ServerArgs server_args;
    CLI::App app("serve");
    tessera::server::FlagTable table(app, server_args, tessera::server::FlagTable::Mode::kServe);
    if (table.parse(args).ok()) {
        (void)table.resolve();
        (void)table.ignored_flags();
    }

    const std::string path = "launch_flags_fuzz_" + std::to_string(::getpid()) + ".yaml";
    if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(data, 1, size, f);
        std::fclose(f);
        (void)tessera::server::read_config_file(path);
        std::remove(path.c_str());
    }
    return 0;
}
