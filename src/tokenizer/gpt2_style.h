#pragma once
// tokenizer/gpt2_style.h — a GPT-2-style tokenizer folder written from any byte-level BPE
// vocabulary: the same vocab, merges and added tokens, with GPT-2's pipeline (no
// normalizer, pre_tokenizer ByteLevel with its own regex, ByteLevel decoder and
// post-processor). tests/tokenizer/golden/generate.js derives the same file for the goldens,
// and `make-model --tokenizer gpt2` ships it. Plain functions.

#include <string>

#include "base/status.h"

namespace tessera::tokenizer {

// Reads <src_dir>/tokenizer.json (byte-level BPE) and tokenizer_config.json and writes both,
// GPT-2 style, to <dst_dir> (created if missing).
Status write_gpt2_style_tokenizer(const std::string& src_dir, const std::string& dst_dir);

}  // namespace tessera::tokenizer
