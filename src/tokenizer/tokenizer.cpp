// tokenizer/tokenizer.cpp — Tokenizer::load and HfBpeTokenizer, the BPE pipeline of Hugging
// Face tokenizer.json files:
//   input bytes → invalid UTF-8 replaced → added tokens split out → normalizer (per text
//   segment) → Split pre-tokenizer(s) → ByteLevel (implicit: BPE works on raw bytes) → BPE →
//   post-processor (e.g. Llama 3's <|begin_of_text|>).
// SentencePiece-style files (Mistral, Llama 2: a ByteLevel-free vocabulary of "▁word"
// strings) take the other branch of each step: Prepend / Replace normalizers, no
// pre-tokenizer (a segment is one piece), BPE over characters with byte fallback, and the
// decoder chain Replace("▁" → " ") → ByteFallback → Fuse → Strip.
// Reference: HF tokenizers (checked against it by tokenizer_test with goldens from
// tests/tokenizer/golden/). Every tokenizer.json feature that this pipeline does not
// implement fails load() with Unimplemented naming the field, rather than tokenizing wrongly.
//
// Invalid UTF-8 input: HF tokenizers only ever sees strings, so callers from JS or Python
// hand it text in which each maximal invalid subpart of the bytes became U+FFFD (WHATWG /
// Python errors="replace"). encode() applies that same replacement to its bytes first.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

StatusOr<json> read_json(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::NotFound("cannot open " + path.string());
    std::stringstream buffer;
    buffer << in.rdbuf();
    json doc = json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return Status::InvalidArgument(path.string() + ": not valid JSON");
    return doc;
}

// A token field of tokenizer_config.json: "text", {"content": "text", ...} or null.
std::string token_string(const json& config, const char* key) {
    const auto it = config.find(key);
    if (it == config.end()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
        return (*it)["content"].get<std::string>();
    }
    return "";
}

// eos_token_id of generation_config.json / config.json: an int or a list of ints.
std::vector<std::int32_t> id_or_ids(const json& doc, const char* key) {
    std::vector<std::int32_t> ids;
    const auto it = doc.find(key);
    if (it == doc.end()) return ids;
    if (it->is_number_integer()) ids.push_back(it->get<std::int32_t>());
    if (it->is_array()) {
        for (const json& v : *it) {
            if (v.is_number_integer()) ids.push_back(v.get<std::int32_t>());
        }
    }
    return ids;
}

bool json_bool(const json& obj, const char* key, bool fallback) {
    const auto it = obj.find(key);
    return it != obj.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// "" or null counts as unset for the BPE affix options.
bool json_empty_string_or_null(const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

// The raw bytes a vocabulary string stands for: its byte-level decoding, or the string itself
// when it holds characters outside the byte-level alphabet (HF's ByteLevel decoder rule).
std::string token_text_to_bytes(const std::string& text) {
    auto bytes = byte_level_decode(text);
    return bytes ? std::move(*bytes) : text;
}

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // ▁ U+2581, SentencePiece's space

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        if (!from.empty() && text.substr(i, from.size()) == from) {
            out.append(to);
            i += from.size();
        } else {
            out.push_back(text[i++]);
        }
    }
    return out;
}

// The byte of a SentencePiece byte-fallback token "<0xHH>", or -1.
int fallback_byte(std::string_view token) {
    if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
    int value = 0;
    for (const char c : token.substr(3, 2)) {
        const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

// A normalizer step after the Unicode forms: Prepend (to a non-empty segment) or Replace.
struct TextStep {
    bool prepend = false;
    std::string from;  // Replace: every occurrence of `from` becomes `to`; Prepend: unused
    std::string to;
};

class HfBpeTokenizer final : public Tokenizer {
 public:
    // Setup-only: each init_* step reads one file.
    Status init_tokenizer_json(const fs::path& path);
    Status init_tokenizer_config(const fs::path& path);
    Status init_extra_eos(const fs::path& path);

    // --- Tokenizer
    std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens) const override;
    std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const override;
    std::string token_bytes(std::int32_t id) const override;
    bool is_special(std::int32_t id) const override;
    bool is_fallback_byte(std::int32_t id) const override {
        return id >= 0 && id < vocab_size() && (id_flags_[static_cast<std::size_t>(id)] & kFallbackByte);
    }
    std::int64_t leading_spaces_stripped() const override { return strip_leading_spaces_; }
    std::int64_t vocab_size() const override { return static_cast<std::int64_t>(id_bytes_.size()); }
    std::optional<std::int32_t> bos_token_id() const override { return bos_id_; }
    std::vector<std::int32_t> eos_token_ids() const override { return eos_ids_; }
    std::optional<std::int32_t> token_to_id(std::string_view token) const override;
    const std::string& chat_template() const override { return chat_template_; }
    void set_chat_template(std::string source) override { chat_template_ = std::move(source); }
    std::map<std::string, std::string> named_chat_templates() const override { return named_templates_; }
    // Transformers' own files beside tokenizer_config.json: chat_template.jinja (the template,
    // over the config's) and additional_chat_templates/*.jinja (named ones).
    Status init_chat_template_files(const fs::path& dir);
    const std::string& bos_token() const override { return bos_token_; }
    const std::string& eos_token() const override { return eos_token_; }

 private:
    enum : std::uint8_t { kKnown = 1, kSpecial = 2, kFallbackByte = 4 };

    Status init_model(const json& model, const std::string& file);
    Status init_added_tokens(const json& added, const std::string& file);
    Status init_normalizer(const json& normalizer, const std::string& file);
    Status init_pre_tokenizer(const json& pre, const std::string& file);
    Status init_post_processor(const json& post, const std::string& file);
    Status init_decoder(const json& decoder, const std::string& file);
    // A vocabulary or added token's bytes as decoding produces them.
    std::string decoded_bytes(const std::string& text) const;
    void set_token(std::int32_t id, std::string bytes, std::uint8_t flags);
    void add_eos(std::int32_t id);

    std::unique_ptr<BpeModel> bpe_;
    bool byte_level_ = true;              // else SentencePiece style (see the file comment)
    std::int64_t strip_leading_spaces_ = 0;  // the Strip decoder's `start`
    std::vector<TextStep> text_steps_;
    AddedVocabulary added_;
    std::unordered_map<std::string, std::int32_t> added_ids_;  // content → id
    Normalizer normalizer_;
    std::optional<PreTokenizer> pre_tokenizer_;
    std::vector<std::int32_t> prefix_ids_;  // post-processor, single sequence: before ...
    std::vector<std::int32_t> suffix_ids_;  // ... and after the text's ids
    std::vector<std::string> id_bytes_;     // [vocab_size] raw bytes of each id
    std::vector<std::uint8_t> id_flags_;    // [vocab_size] kKnown | kSpecial

    std::string chat_template_;
    std::map<std::string, std::string> named_templates_;
    std::string bos_token_;  // "" when the model has none
    std::string eos_token_;
    std::optional<std::int32_t> bos_id_;
    std::vector<std::int32_t> eos_ids_;
};

void HfBpeTokenizer::set_token(std::int32_t id, std::string bytes, std::uint8_t flags) {
    const auto index = static_cast<std::size_t>(id);
    if (index >= id_bytes_.size()) {
        id_bytes_.resize(index + 1);
        id_flags_.resize(index + 1, 0);
    }
    id_bytes_[index] = std::move(bytes);
    id_flags_[index] = flags;
}

void HfBpeTokenizer::add_eos(std::int32_t id) {
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
}

Status HfBpeTokenizer::init_tokenizer_json(const fs::path& path) {
    TSR_ASSIGN_OR_RETURN(json doc, read_json(path));
    const std::string file = path.string();
    if (!doc.is_object() || !doc.contains("model")) {
        return Status::InvalidArgument(file + ": missing field 'model'");
    }
    // The decoder says which kind of vocabulary this is; every later step depends on it.
    TSR_RETURN_IF_ERROR(init_decoder(doc.value("decoder", json()), file));
    TSR_RETURN_IF_ERROR(init_model(doc["model"], file));
    TSR_RETURN_IF_ERROR(init_added_tokens(doc.value("added_tokens", json::array()), file));
    TSR_RETURN_IF_ERROR(init_normalizer(doc.value("normalizer", json()), file));
    TSR_RETURN_IF_ERROR(init_pre_tokenizer(doc.value("pre_tokenizer", json()), file));
    TSR_RETURN_IF_ERROR(init_post_processor(doc.value("post_processor", json()), file));
    return Status::Ok();
}

Status HfBpeTokenizer::init_decoder(const json& decoder, const std::string& file) {
    if (decoder.is_object() && decoder.value("type", "") == "ByteLevel") return Status::Ok();
    // SentencePiece style (Mistral, Llama 2): Replace("▁", " "), ByteFallback, Fuse, Strip.
    const auto unsupported = [&] {
        return Status::Unimplemented(file + ": decoder " + decoder.dump().substr(0, 300) +
                                     " is not supported (ByteLevel, or Sequence[Replace(\"\u2581\", \" \"), "
                                     "ByteFallback, Fuse, Strip(\" \", n, 0)])");
    };
    if (!decoder.is_object() || decoder.value("type", "") != "Sequence") return unsupported();
    const json steps = decoder.value("decoders", json::array());
    if (steps.size() < 3 || steps.size() > 4) return unsupported();
    const json& replace = steps[0];
    if (replace.value("type", "") != "Replace" || !replace.contains("pattern") ||
        replace["pattern"].value("String", "") != kSpaceMarker || replace.value("content", "") != " " ||
        steps[1].value("type", "") != "ByteFallback" || steps[2].value("type", "") != "Fuse")
        return unsupported();
    if (steps.size() == 4) {
        const json& strip = steps[3];
        if (strip.value("type", "") != "Strip" || strip.value("content", "") != " " ||
            strip.value("stop", std::int64_t{0}) != 0)
            return unsupported();
        strip_leading_spaces_ = strip.value("start", std::int64_t{0});
    }
    byte_level_ = false;
    return Status::Ok();
}

std::string HfBpeTokenizer::decoded_bytes(const std::string& text) const {
    if (byte_level_) return token_text_to_bytes(text);
    const int byte = fallback_byte(text);
    return byte >= 0 ? std::string(1, static_cast<char>(byte)) : replace_all(text, kSpaceMarker, " ");
}

Status HfBpeTokenizer::init_model(const json& model, const std::string& file) {
    if (model.value("type", "") != "BPE") {
        return Status::Unimplemented(file + ": model.type '" + model.value("type", "?") +
                                     "' is not supported (only byte-level BPE)");
    }
    if (json_bool(model, "byte_fallback", false) && byte_level_) {
        return Status::Unimplemented(file + ": model.byte_fallback with a ByteLevel decoder is not supported");
    }
    if (model.contains("dropout") && !model["dropout"].is_null()) {
        return Status::Unimplemented(file + ": model.dropout is not supported");
    }
    if (!json_empty_string_or_null(model, "continuing_subword_prefix") ||
        !json_empty_string_or_null(model, "end_of_word_suffix")) {
        return Status::Unimplemented(file + ": model.continuing_subword_prefix / "
                                     "end_of_word_suffix are not supported");
    }
    const auto vocab_it = model.find("vocab");
    if (vocab_it == model.end() || !vocab_it->is_object()) {
        return Status::InvalidArgument(file + ": model.vocab must be an object");
    }
    std::vector<std::pair<std::string, std::int32_t>> vocab;
    vocab.reserve(vocab_it->size());
    for (const auto& [text, id_json] : vocab_it->items()) {
        if (!id_json.is_number_integer() || id_json.get<std::int64_t>() < 0) {
            return Status::InvalidArgument(file + ": model.vocab['" + text + "'] is not an id");
        }
        const auto id = id_json.get<std::int32_t>();
        if (!byte_level_) {
            vocab.emplace_back(text, id);
            set_token(id, decoded_bytes(text),
                      static_cast<std::uint8_t>(kKnown | (fallback_byte(text) >= 0 ? kFallbackByte : 0)));
            continue;
        }
        // An entry outside the byte-level alphabet can never be produced by BPE over bytes;
        // it keeps its text for decoding only.
        auto bytes = byte_level_decode(text);
        if (bytes) vocab.emplace_back(*bytes, id);
        set_token(id, bytes ? std::move(*bytes) : text, kKnown);
    }
    const auto merges_it = model.find("merges");
    if (merges_it == model.end() || !merges_it->is_array()) {
        return Status::InvalidArgument(file + ": model.merges must be an array");
    }
    // Two formats: "left right" strings (older files, Llama 3) or [left, right] pairs (Qwen3).
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merges_it->size());
    for (const json& m : *merges_it) {
        std::string left;
        std::string right;
        if (m.is_string()) {
            const std::string& s = m.get_ref<const std::string&>();
            const std::size_t space = s.find(' ');
            if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
                return Status::InvalidArgument(file + ": model.merges entry '" + s +
                                               "' is not 'left right'");
            }
            left = s.substr(0, space);
            right = s.substr(space + 1);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            left = m[0].get<std::string>();
            right = m[1].get<std::string>();
        } else {
            return Status::InvalidArgument(file + ": model.merges entry " + m.dump() +
                                           " is neither 'a b' nor [a, b]");
        }
        if (byte_level_) {
            merges.emplace_back(token_text_to_bytes(left), token_text_to_bytes(right));
        } else {
            merges.emplace_back(std::move(left), std::move(right));
        }
    }
    BpeOptions options;
    options.ignore_merges = json_bool(model, "ignore_merges", false);
    options.char_symbols = !byte_level_;
    options.byte_fallback = json_bool(model, "byte_fallback", false);
    options.fuse_unk = json_bool(model, "fuse_unk", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        const auto unk = vocab_it->find(model["unk_token"].get<std::string>());
        if (unk == vocab_it->end())
            return Status::InvalidArgument(file + ": model.unk_token is not in model.vocab");
        options.unk_id = unk->get<std::int32_t>();
    }
    auto bpe = BpeModel::create(vocab, merges, options);
    if (!bpe.ok()) return Status(bpe.status().code(), file + ": " + bpe.status().message());
    bpe_ = std::move(bpe).value();
    return Status::Ok();
}

Status HfBpeTokenizer::init_added_tokens(const json& added, const std::string& file) {
    if (!added.is_array()) return Status::InvalidArgument(file + ": added_tokens must be a list");
    std::vector<AddedToken> tokens;
    for (const json& t : added) {
        if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
            !t.contains("content") || !t["content"].is_string()) {
            return Status::InvalidArgument(file + ": added_tokens entry " + t.dump() +
                                           " lacks id/content");
        }
        if (json_bool(t, "single_word", false)) {
            return Status::Unimplemented(file + ": added token '" +
                                         t["content"].get<std::string>() +
                                         "' uses single_word, which is not supported");
        }
        // "normalized": true tokens are matched on the raw text too; that differs from HF only
        // for token contents that the normalizer would change (none in the supported files).
        AddedToken token;
        token.content = t["content"].get<std::string>();
        token.id = t["id"].get<std::int32_t>();
        token.special = json_bool(t, "special", false);
        token.lstrip = json_bool(t, "lstrip", false);
        token.rstrip = json_bool(t, "rstrip", false);
        if (token.id < 0) return Status::InvalidArgument(file + ": added token with negative id");
        // Decoding runs the decoder over added tokens too.
        set_token(token.id, decoded_bytes(token.content),
                  static_cast<std::uint8_t>(kKnown | (token.special ? kSpecial : 0)));
        added_ids_[token.content] = token.id;
        tokens.push_back(std::move(token));
    }
    added_ = AddedVocabulary(tokens);
    return Status::Ok();
}

Status HfBpeTokenizer::init_normalizer(const json& normalizer, const std::string& file) {
    std::vector<NormalizationForm> forms;
    std::vector<json> steps;
    if (normalizer.is_null()) return Status::Ok();
    if (normalizer.value("type", "") == "Sequence") {
        for (const json& n : normalizer.value("normalizers", json::array())) steps.push_back(n);
    } else {
        steps.push_back(normalizer);
    }
    for (const json& n : steps) {
        const std::string type = n.value("type", "");
        if (type == "NFC") {
            forms.push_back(NormalizationForm::kNfc);
        } else if (type == "NFD") {
            forms.push_back(NormalizationForm::kNfd);
        } else if (type == "NFKC") {
            forms.push_back(NormalizationForm::kNfkc);
        } else if (type == "NFKD") {
            forms.push_back(NormalizationForm::kNfkd);
        } else if ((type == "Prepend" || type == "Replace") && !byte_level_) {
            TextStep step;
            step.prepend = type == "Prepend";
            if (step.prepend) {
                step.to = n.value("prepend", "");
            } else {
                if (!n.contains("pattern") || !n["pattern"].contains("String"))
                    return Status::Unimplemented(file + ": normalizer Replace with a regex pattern is not supported");
                step.from = n["pattern"].value("String", "");
                step.to = n.value("content", "");
            }
            text_steps_.push_back(std::move(step));
            continue;
        } else {
            return Status::Unimplemented(file + ": normalizer '" + type +
                                         "' is not supported (NFC, NFD, NFKC, NFKD, Sequence; Prepend and "
                                         "Replace with a SentencePiece-style decoder)");
        }
        if (!text_steps_.empty())
            return Status::Unimplemented(file + ": a Unicode normalization form after Prepend / Replace is not supported");
    }
    normalizer_ = Normalizer(std::move(forms));
    return Status::Ok();
}

Status HfBpeTokenizer::init_pre_tokenizer(const json& pre, const std::string& file) {
    // SentencePiece style: no pre-tokenizer, each normalized segment is one BPE piece.
    if (pre.is_null() && !byte_level_) return Status::Ok();
    // Supported shapes: Sequence[Split(Regex, Isolated), ..., ByteLevel(use_regex=false)]:
    // one Split for Qwen and Llama 3, three for DeepSeek V3; or ByteLevel(use_regex=true)
    // alone (GPT-2 and the files written like it).
    const auto unsupported = [&](const std::string& why) {
        return Status::Unimplemented(file + ": pre_tokenizer " + why + " is not supported");
    };
    // GPT-2 style: ByteLevel alone, splitting with its own regex.
    if (pre.is_object() && pre.value("type", "") == "ByteLevel") {
        if (!json_bool(pre, "use_regex", true)) return unsupported("ByteLevel without use_regex and without a Split");
        if (json_bool(pre, "add_prefix_space", true))
            return unsupported("ByteLevel with add_prefix_space (tessera reads GPT-2's add_prefix_space false)");
        pre_tokenizer_.emplace(SplitPattern::kGpt2);
        return Status::Ok();
    }
    if (!pre.is_object() || pre.value("type", "") != "Sequence") {
        return unsupported(pre.dump().substr(0, 200));
    }
    const json steps = pre.value("pretokenizers", json::array());
    if (steps.size() < 2 || steps.back().value("type", "") != "ByteLevel") {
        return unsupported("sequence " + steps.dump().substr(0, 200));
    }
    std::vector<SplitPattern> patterns;
    for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
        const json& split = steps[i];
        if (split.value("type", "") != "Split") {
            return unsupported("sequence " + steps.dump().substr(0, 200));
        }
        if (split.value("behavior", "") != "Isolated" || json_bool(split, "invert", false)) {
            return unsupported("Split behavior '" + split.value("behavior", "") + "'");
        }
        if (!split.contains("pattern") || !split["pattern"].is_object() ||
            !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string()) {
            return unsupported("Split pattern " + split.value("pattern", json()).dump());
        }
        auto pattern = split_pattern_from_regex(split["pattern"]["Regex"].get<std::string>());
        if (!pattern.ok()) {
            return Status(pattern.status().code(), file + ": " + pattern.status().message());
        }
        patterns.push_back(pattern.value());
    }
    const json& byte_level = steps.back();
    if (json_bool(byte_level, "add_prefix_space", false) ||
        json_bool(byte_level, "use_regex", true)) {
        return unsupported("ByteLevel with add_prefix_space or use_regex");
    }
    pre_tokenizer_.emplace(std::move(patterns));
    return Status::Ok();
}

Status HfBpeTokenizer::init_post_processor(const json& post, const std::string& file) {
    if (post.is_null()) return Status::Ok();
    const std::string type = post.value("type", "");
    if (type == "ByteLevel") return Status::Ok();  // only adjusts offsets
    if (type == "Sequence") {
        for (const json& p : post.value("processors", json::array())) {
            TSR_RETURN_IF_ERROR(init_post_processor(p, file));
        }
        return Status::Ok();
    }
    if (type != "TemplateProcessing") {
        return Status::Unimplemented(file + ": post_processor '" + type + "' is not supported");
    }
    const json special = post.value("special_tokens", json::object());
    bool after_sequence = false;
    for (const json& item : post.value("single", json::array())) {
        if (item.contains("Sequence")) {
            after_sequence = true;
            continue;
        }
        if (!item.contains("SpecialToken")) {
            return Status::InvalidArgument(file + ": post_processor.single item " + item.dump());
        }
        const std::string name = item["SpecialToken"].value("id", "");
        if (!special.contains(name) || !special[name].contains("ids")) {
            return Status::InvalidArgument(file + ": post_processor.special_tokens lacks '" +
                                           name + "'");
        }
        auto& target = after_sequence ? suffix_ids_ : prefix_ids_;
        for (const json& id : special[name]["ids"]) target.push_back(id.get<std::int32_t>());
    }
    return Status::Ok();
}

Status HfBpeTokenizer::init_tokenizer_config(const fs::path& path) {
    if (!fs::exists(path)) return Status::Ok();  // tokenizer.json alone is a valid tokenizer
    TSR_ASSIGN_OR_RETURN(json config, read_json(path));
    if (!config.is_object()) return Status::InvalidArgument(path.string() + ": not an object");
    bos_token_ = token_string(config, "bos_token");
    eos_token_ = token_string(config, "eos_token");
    if (const auto it = config.find("chat_template"); it != config.end()) {
        if (it->is_string()) {
            chat_template_ = it->get<std::string>();
        } else if (it->is_array()) {
            // Named templates: [{"name": "default", "template": "..."}, ...].
            for (const json& t : *it) {
                if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) continue;
                named_templates_[t["name"].get<std::string>()] = t.value("template", "");
                if (t["name"] == "default") chat_template_ = t.value("template", "");
            }
            // No "default": the first one, as SGLang takes it.
            if (chat_template_.empty() && !it->empty() && (*it)[0].is_object())
                chat_template_ = (*it)[0].value("template", "");
        }
    }
    if (!bos_token_.empty()) {
        bos_id_ = token_to_id(bos_token_);
        if (!bos_id_) {
            return Status::InvalidArgument(path.string() + ": bos_token '" + bos_token_ +
                                           "' is not in the vocabulary");
        }
    }
    if (!eos_token_.empty()) {
        const auto eos = token_to_id(eos_token_);
        if (!eos) {
            return Status::InvalidArgument(path.string() + ": eos_token '" + eos_token_ +
                                           "' is not in the vocabulary");
        }
        add_eos(*eos);
    }
    // LlamaTokenizer flags: honoured when the post-processor does not already add the token;
    // an explicit false does not remove a template's token. transformers' LlamaTokenizerFast
    // rebuilds the post-processor from them, so DeepSeek V3 (whose tokenizer.json has a
    // ByteLevel post-processor only) gets its BOS here, as it does from transformers.
    if (json_bool(config, "add_bos_token", false) && bos_id_ &&
        (prefix_ids_.empty() || prefix_ids_.front() != *bos_id_)) {
        prefix_ids_.insert(prefix_ids_.begin(), *bos_id_);
    }
    if (json_bool(config, "add_eos_token", false) && !eos_ids_.empty() &&
        (suffix_ids_.empty() || suffix_ids_.back() != eos_ids_.front())) {
        suffix_ids_.push_back(eos_ids_.front());
    }
    return Status::Ok();
}

Status HfBpeTokenizer::init_extra_eos(const fs::path& path) {
    if (!fs::exists(path)) return Status::Ok();
    TSR_ASSIGN_OR_RETURN(json doc, read_json(path));
    if (!doc.is_object()) return Status::InvalidArgument(path.string() + ": not an object");
    for (const std::int32_t id : id_or_ids(doc, "eos_token_id")) {
        if (id < 0 || id >= vocab_size()) {
            return Status::InvalidArgument(path.string() + ": eos_token_id " + std::to_string(id) +
                                           " is outside the vocabulary");
        }
        add_eos(id);
    }
    return Status::Ok();
}

// ------------------------------------------------------------------------ Tokenizer

std::vector<std::int32_t> HfBpeTokenizer::encode(std::string_view text,
                                                 bool add_special_tokens) const {
    thread_local std::vector<AddedVocabulary::Segment> segments;
    thread_local std::vector<std::string_view> pieces;
    thread_local std::string normalized_storage;

    std::string replaced;
    if (!is_valid_utf8(text)) {
        replaced = utf8_replace_invalid(text);
        text = replaced;
    }
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 8 + prefix_ids_.size() + suffix_ids_.size());
    if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
    segments.clear();
    added_.split(text, segments);
    for (const AddedVocabulary::Segment& segment : segments) {
        if (segment.id >= 0) {
            ids.push_back(segment.id);
            continue;
        }
        std::string_view normalized = normalizer_.normalize(segment.text, normalized_storage);
        std::string stepped;
        if (!text_steps_.empty()) {
            stepped.assign(normalized);
            for (const TextStep& step : text_steps_) {
                if (step.prepend) {
                    if (!stepped.empty()) stepped.insert(0, step.to);
                } else {
                    stepped = replace_all(stepped, step.from, step.to);
                }
            }
            normalized = stepped;
        }
        if (!pre_tokenizer_) {
            if (!normalized.empty()) bpe_->encode_piece(normalized, ids);
            continue;
        }
        pieces.clear();
        pre_tokenizer_->split(normalized, pieces);
        for (const std::string_view piece : pieces) bpe_->encode_piece(piece, ids);
    }
    if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    return ids;
}

std::string HfBpeTokenizer::decode(std::span<const std::int32_t> ids,
                                   bool skip_special_tokens) const {
    // Like HF: unknown ids are dropped, all token bytes are joined, and the result is read
    // as UTF-8 with maximal invalid subparts replaced by U+FFFD.
    std::string bytes;
    // SentencePiece's ByteFallback: a run of byte tokens that is not valid UTF-8 becomes one
    // U+FFFD per byte.
    std::string fallback_run;
    const auto flush_fallback = [&] {
        if (is_valid_utf8(fallback_run)) {
            bytes += fallback_run;
        } else {
            for (std::size_t i = 0; i < fallback_run.size(); ++i) bytes += "\xEF\xBF\xBD";
        }
        fallback_run.clear();
    };
    for (const std::int32_t id : ids) {
        if (id < 0 || id >= vocab_size()) continue;
        const std::uint8_t flags = id_flags_[static_cast<std::size_t>(id)];
        if (!(flags & kKnown) || (skip_special_tokens && (flags & kSpecial))) continue;
        if (flags & kFallbackByte) {
            fallback_run += id_bytes_[static_cast<std::size_t>(id)];
            continue;
        }
        if (!fallback_run.empty()) flush_fallback();
        bytes += id_bytes_[static_cast<std::size_t>(id)];
    }
    if (!fallback_run.empty()) flush_fallback();
    if (!byte_level_) {
        std::size_t strip = 0;
        while (strip < bytes.size() && static_cast<std::int64_t>(strip) < strip_leading_spaces_ && bytes[strip] == ' ')
            ++strip;
        bytes.erase(0, strip);
    }
    if (is_valid_utf8(bytes)) return bytes;
    return utf8_replace_invalid(bytes);
}

std::string HfBpeTokenizer::token_bytes(std::int32_t id) const {
    if (id < 0 || id >= vocab_size()) return "";
    return id_bytes_[static_cast<std::size_t>(id)];
}

bool HfBpeTokenizer::is_special(std::int32_t id) const {
    return id >= 0 && id < vocab_size() && (id_flags_[static_cast<std::size_t>(id)] & kSpecial);
}

Status HfBpeTokenizer::init_chat_template_files(const fs::path& dir) {
    const auto read_text = [](const fs::path& path) -> StatusOr<std::string> {
        std::ifstream in(path, std::ios::binary);
        std::stringstream text;
        if (in) text << in.rdbuf();
        if (!in) return Status::InvalidArgument(path.string() + ": cannot read the chat template");
        return text.str();
    };
    if (fs::exists(dir / "chat_template.jinja")) {
        TSR_ASSIGN_OR_RETURN(chat_template_, read_text(dir / "chat_template.jinja"));
        named_templates_["default"] = chat_template_;
    }
    const fs::path extra = dir / "additional_chat_templates";
    if (!fs::is_directory(extra)) return Status::Ok();
    for (const auto& entry : fs::directory_iterator(extra)) {
        if (entry.path().extension() != ".jinja") continue;
        TSR_ASSIGN_OR_RETURN(named_templates_[entry.path().stem().string()], read_text(entry.path()));
    }
    return Status::Ok();
}

std::optional<std::int32_t> HfBpeTokenizer::token_to_id(std::string_view token) const {
    if (const auto it = added_ids_.find(std::string(token)); it != added_ids_.end()) {
        return it->second;
    }
    if (!byte_level_) return bpe_->id_of(token);
    const auto bytes = byte_level_decode(token);
    if (!bytes) return std::nullopt;
    return bpe_->id_of(*bytes);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_dir) {
    const fs::path dir(model_dir);
    auto tokenizer = std::make_unique<HfBpeTokenizer>();
    TSR_RETURN_IF_ERROR(tokenizer->init_tokenizer_json(dir / "tokenizer.json"));
    TSR_RETURN_IF_ERROR(tokenizer->init_tokenizer_config(dir / "tokenizer_config.json"));
    TSR_RETURN_IF_ERROR(tokenizer->init_chat_template_files(dir));
    TSR_RETURN_IF_ERROR(tokenizer->init_extra_eos(dir / "generation_config.json"));
    TSR_RETURN_IF_ERROR(tokenizer->init_extra_eos(dir / "config.json"));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace tessera::tokenizer
