#pragma once
// server/sglang_flags.h — every flag of SGLang's `launch_server` (server_args.py and the
// manual entries of ServerArgs.add_cli_args), read from sglang_flags.tsv, with what tessera
// does about each: implements it (the flag table in server_args_cli.cpp), ignores it on CPU,
// or accepts it only at values that ask for nothing tessera lacks.

#include <string>
#include <vector>

namespace tessera::server {

struct SglangFlag {
    enum class Kind {
        kSwitch,          // store_true
        kOptionalSwitch,  // argparse BooleanOptionalAction: --x / --no-x
        kValue,           // one value
        kList,            // nargs="+" (or "*")
    };
    enum class Tessera {
        kImplemented,     // a flag of the table in server_args_cli.cpp
        kConfigFile,      // --config
        kGpuOnly,         // tunes GPU machinery: accepted, logged as having no effect on CPU
        kIgnored,         // accepted with any value, logged with `reason`
        kNotImplemented,  // accepted only at a neutral value (`is_neutral`)
    };

    std::vector<std::string> names;  // primary first
    Kind kind = Kind::kValue;
    std::string type;           // int, float, str or json (of each value)
    std::string default_value;  // as SGLang writes it: None, False, "auto", 1.0
    std::vector<std::string> choices;
    std::string section;
    Tessera tessera = Tessera::kNotImplemented;
    std::string reason;  // kIgnored: why it has no effect; kNotImplemented: the feature, when named
    std::vector<std::string> also_neutral;  // values besides the default that ask for nothing new
    std::string help;

    // The default without Python's quotes ("auto", not "\"auto\"").
    std::string default_text() const;
    // Whether `value` asks for nothing beyond SGLang's default (numbers compare by value).
    bool is_neutral(const std::string& value) const;
};

// The whole catalogue, parsed once from the table compiled into the binary.
const std::vector<SglangFlag>& sglang_flags();

}  // namespace tessera::server
