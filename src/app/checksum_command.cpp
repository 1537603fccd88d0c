// app/checksum_command.cpp — `tessera checksum` (the manifest SGLang's --model-checksum reads)
// and the check of --model-checksum before a launch.

#include <cstdio>

#include "app/commands.h"
#include "base/logging.h"
#include "loader/model_checksum.h"

namespace tessera::app {

int run_checksum(const std::string& model_path) {
    auto manifest = loader::model_files_manifest(model_path);
    if (!manifest.ok()) {
        TSR_LOG(ERROR, "{}", manifest.status().message());
        return 1;
    }
    std::fputs(manifest->c_str(), stdout);
    return 0;
}

Status verify_model_checksum(const server::ServerArgs& args) {
    if (!args.model_checksum) return Status::Ok();
    TSR_LOG(INFO, "checking the model files against {}", *args.model_checksum);
    TSR_RETURN_IF_ERROR(loader::verify_model_files(args.model_path, *args.model_checksum));
    TSR_LOG(INFO, "model files verified against {}", *args.model_checksum);
    return Status::Ok();
}

}  // namespace tessera::app
