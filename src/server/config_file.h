#pragma once
// server/config_file.h — SGLang's `--config FILE.yaml` (server_args_config_parser.py
// ConfigArgumentMerger): a YAML mapping whose keys are flag names without the leading
// dashes. Reading only; turning entries into arguments needs the flag table (FlagTable).

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::server {

struct ConfigEntry {
    std::string key;                  // as written: "tp-size"
    std::optional<bool> boolean;      // a YAML boolean (true, false, yes, off, ...)
    std::vector<std::string> values;  // a scalar (one value) or a list's items; null reads "None" as in Python
};

// Entries in file order. Errors carry SGLang's messages: a suffix other than .yaml/.yml, a
// missing file, a YAML syntax error (with line and column), a root that is not a mapping; and
// one SGLang lacks: a nested mapping, which has to be written as a JSON string.
StatusOr<std::vector<ConfigEntry>> read_config_file(const std::string& path);

}  // namespace tessera::server
