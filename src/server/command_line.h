#pragma once
// server/command_line.h — reading a launch command line as SGLang's argparse parser does,
// before the flag table sees it: unique prefixes of long flags (`--tp 4`, `--dp=2`) and
// `--config FILE.yaml` (SGLang's server_args_config_parser.py ConfigArgumentMerger).
// Pure functions over strings; no CLI library.

#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::server {

struct KnownFlag {
    std::string name;  // "--tp-size"
    bool takes_value = true;
};

// argparse's abbreviation rule (argparse.py `_parse_optional`): a long flag that is not
// known exactly stands for the one known flag it is a prefix of; two or more candidates are
// "ambiguous option: --x could match --x-a, --x-b"; none is "unrecognized arguments: --x".
// `--name=value` abbreviates the part before '='. Values of flags that take one, and
// everything after a bare `--`, are left alone.
StatusOr<std::vector<std::string>> expand_abbreviations(const std::vector<std::string>& args,
                                                        const std::vector<KnownFlag>& known);

}  // namespace tessera::server
