#pragma once
// loader/model_checksum.h — SGLang's --model-checksum (utils/model_file_verifier.py): the files
// of a model folder checked against a manifest of SHA-256 digests and sizes, before any weight
// is read. The manifest is SGLang's JSON:
//   {"files": {"model-00001-of-00002.safetensors": {"sha256": "…", "size": 4966276480}, …}}
// or its older {"checksums": {"model.safetensors": "…"}}. Only the files it lists are checked.

#include <string>

#include "base/status.h"

namespace tessera::loader {

// Ok when every listed file of `model_dir` has its digest (and size, when given); otherwise
// DataLoss "Integrity check failed: F: missing (expected size=…); G: mismatch (expected=…
// size=…, actual=… size=…)", as SGLang words it. A manifest that cannot be read or parsed is
// InvalidArgument.
Status verify_model_files(const std::string& model_dir, const std::string& manifest_path);

// The manifest of `model_dir`: every regular file at its top level but READMEs, licences,
// *.md, *.lock and hidden files, in name order.
StatusOr<std::string> model_files_manifest(const std::string& model_dir);

}  // namespace tessera::loader
