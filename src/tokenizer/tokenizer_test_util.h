#pragma once
// tokenizer/tokenizer_test_util.h — shared by the tokenizer tests: the real tokenizers of
// TSR_TOKENIZER_ASSETS (loaded once per process) and the golden cases of
// TSR_TOKENIZER_GOLDEN, produced by Hugging Face tokenizers (see
// tests/tokenizer/golden/README.md to regenerate them). Test-only; both loaders are
// thread-safe (ConcurrentEncodeIsConsistent calls them from several threads at once).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/gpt2_style.h"
#include "tokenizer/tokenizer.h"

namespace tessera::tokenizer::testing {

struct GoldenCase {
    std::string label;  // for failure messages
    std::string text;   // exact input bytes (may be invalid UTF-8)
    std::vector<std::int32_t> ids;               // encode(text, add_special_tokens=false)
    std::vector<std::int32_t> ids_with_special;  // encode(text, true)
    std::string decoded;               // decode(ids_with_special, skip_special=false)
    std::string decoded_skip_special;  // decode(ids_with_special, true)
    std::string decoded_plain;         // decode(ids, false)
};

struct DecodeCase {
    std::vector<std::int32_t> ids;  // arbitrary ids: reversed, gapped, out of range
    std::string decoded;
    std::string decoded_skip_special;
};

struct Golden {
    std::int64_t vocab_size = 0;
    std::vector<GoldenCase> cases;
    std::vector<DecodeCase> decode_cases;
};

inline std::string hex_to_bytes(const std::string& hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
        out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    return out;
}

inline std::string printable(const std::string& s) {
    std::string out;
    for (const char c : s.substr(0, 60)) {
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else {
            out += c;
        }
    }
    return out;
}

inline const Golden& golden(const std::string& name) {
    static std::mutex mu;
    const std::lock_guard<std::mutex> lock(mu);
    static std::map<std::string, Golden> cache;
    if (const auto it = cache.find(name); it != cache.end()) return it->second;
    const std::string path = std::string(TSR_TOKENIZER_GOLDEN) + "/" + name + ".json";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "missing golden file " << path;
    std::stringstream buffer;
    buffer << in.rdbuf();
    const nlohmann::json doc = nlohmann::json::parse(buffer.str());
    Golden g;
    g.vocab_size = doc["vocab_size_with_added"].get<std::int64_t>();
    for (const auto& c : doc["cases"]) {
        GoldenCase gc;
        if (c.contains("text_bytes_hex")) {
            gc.text = hex_to_bytes(c["text_bytes_hex"].get<std::string>());
            gc.label = "hex " + c["text_bytes_hex"].get<std::string>();
        } else {
            gc.text = c["text"].get<std::string>();
            // Built by append: GCC 12 warns (-Wrestrict, falsely) on "\"" + std::string&&.
            gc.label.append("text \"").append(printable(gc.text)).append("\"");
        }
        gc.ids = c["ids"].get<std::vector<std::int32_t>>();
        gc.ids_with_special = c["ids_with_special"].get<std::vector<std::int32_t>>();
        gc.decoded = c["decoded"].get<std::string>();
        gc.decoded_skip_special = c["decoded_skip_special"].get<std::string>();
        gc.decoded_plain = c["decoded_plain"].get<std::string>();
        g.cases.push_back(std::move(gc));
    }
    for (const auto& c : doc["decode_cases"]) {
        g.decode_cases.push_back({c["ids"].get<std::vector<std::int32_t>>(),
                                  c["decoded"].get<std::string>(),
                                  c["decoded_skip_special"].get<std::string>()});
    }
    return cache.emplace(name, std::move(g)).first->second;
}

// The real tokenizer <assets>/<name>; "gpt2_style" is Qwen3's vocabulary written GPT-2 style
// (tokenizer/gpt2_style.h), as generate.js derives it for its golden. Aborts the test
// binary's expectations if loading fails.
inline const Tokenizer& real_tokenizer(const std::string& name) {
    static std::mutex mu;
    const std::lock_guard<std::mutex> lock(mu);
    static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
    if (const auto it = cache.find(name); it != cache.end()) return *it->second;
    std::string dir = std::string(TSR_TOKENIZER_ASSETS) + "/" + name;
    if (name == "gpt2_style") {
        // A folder of its own (mkdtemp): test processes run in parallel.
        std::string pattern = (std::filesystem::temp_directory_path() / "tessera_gpt2_style_XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            ADD_FAILURE() << "mkdtemp " << pattern;
            std::abort();
        }
        dir = pattern;
        const Status written = write_gpt2_style_tokenizer(std::string(TSR_TOKENIZER_ASSETS) + "/qwen3", dir);
        if (!written.ok()) {
            ADD_FAILURE() << "writing " << dir << ": " << written.message();
            std::abort();
        }
    }
    auto loaded = Tokenizer::load(dir);
    if (name == "gpt2_style") std::filesystem::remove_all(dir);
    if (!loaded.ok()) {
        ADD_FAILURE() << "loading " << name << ": " << loaded.status().message();
        std::abort();
    }
    return *cache.emplace(name, std::move(loaded).value()).first->second;
}

inline std::string ids_to_string(const std::vector<std::int32_t>& ids) {
    std::string s;
    for (const auto id : ids) s += std::to_string(id) + " ";
    return s;
}

}  // namespace tessera::tokenizer::testing
