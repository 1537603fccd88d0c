#pragma once
// tokenizer/tokenizer.h — a Hugging Face `tokenizer.json` BPE tokenizer: byte-level (GPT-2's
// ByteLevel regex, or the Split pre-tokenizers of Qwen2 / Qwen3 / Llama 3 / DeepSeek V3) or
// SentencePiece-style with byte fallback (Mistral, Llama 2) with its added and special tokens, plus the
// special-token settings of `tokenizer_config.json`. Immutable after load(); encode/decode
// are thread-safe (the word cache is internally synchronised).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::tokenizer {

class Tokenizer {
 public:
    virtual ~Tokenizer() = default;

    // Reads <model_dir>/tokenizer.json and tokenizer_config.json (and, for eos ids,
    // generation_config.json / config.json when present). Errors name the file and field.
    static StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& model_dir);

    // Token ids of `text`. add_special_tokens applies the post-processor (e.g. Llama 3's
    // BOS). Invalid UTF-8 is handled as the reference library does (see the .cpp).
    virtual std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;

    // Text of `ids`; bytes of an incomplete UTF-8 sequence become U+FFFD, as the reference.
    virtual std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const = 0;

    // Raw bytes of one token (special tokens: their content), for the incremental detokenizer.
    virtual std::string token_bytes(std::int32_t id) const = 0;
    virtual bool is_special(std::int32_t id) const = 0;
    // SentencePiece-style decoding (Mistral): a byte-fallback token "<0xHH>" (runs of them that
    // are not valid UTF-8 decode to one U+FFFD per byte), and how many leading spaces the
    // decoded text loses (the Strip decoder).
    virtual bool is_fallback_byte(std::int32_t /*id*/) const { return false; }
    virtual std::int64_t leading_spaces_stripped() const { return 0; }

    // Highest id + 1 over the vocabulary and the added tokens.
    virtual std::int64_t vocab_size() const = 0;

    virtual std::optional<std::int32_t> bos_token_id() const = 0;
    virtual std::vector<std::int32_t> eos_token_ids() const = 0;
    virtual std::optional<std::int32_t> token_to_id(std::string_view token) const = 0;

    // The chat template source ("" when absent): chat_template.jinja in the folder, else
    // tokenizer_config.json's (its "default" one when it names several); and the bos/eos
    // token strings the template may use.
    virtual const std::string& chat_template() const = 0;
    // Templates by name: tokenizer_config.json's list of {"name", "template"} and the
    // folder's additional_chat_templates/NAME.jinja (--hf-chat-template-name picks one).
    virtual std::map<std::string, std::string> named_chat_templates() const { return {}; }
    // --chat-template: another template in place of tokenizer_config.json's.
    virtual void set_chat_template(std::string source) = 0;
    virtual const std::string& bos_token() const = 0;
    virtual const std::string& eos_token() const = 0;
};

// Streaming decode: feed ids one at a time, get the text that became final. Never emits a
// broken UTF-8 sequence and never loses bytes: a character split across tokens is held
// back until complete; flush() returns what is left (invalid tails as U+FFFD).
// Concatenating every add() and the flush() equals Tokenizer::decode of all ids.
// One instance per stream; not thread-safe.
class IncrementalDetokenizer {
 public:
    IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
    std::string add(std::int32_t id);
    std::string flush();

 private:
    void resolve_fallback_run();
    std::string strip_leading(std::string text);

    const Tokenizer& tokenizer_;
    bool skip_special_tokens_;
    std::string pending_;       // bytes of an unfinished UTF-8 sequence
    std::string fallback_run_;  // bytes of byte-fallback tokens, judged when the run ends
    std::int64_t strip_remaining_ = 0;
};

}  // namespace tessera::tokenizer
