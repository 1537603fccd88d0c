// bench/tokenizer_bench.cpp — encode throughput of the real tokenizers (bench_tokenizer).
// Builds a deterministic ~1 MB mixed text (about 60% English prose, 20% code, 15% Chinese,
// 5% emoji, plus made-up words so that BPE has work beyond the word cache) and prints one
// JSON line per tokenizer: the first (cold cache) run and the median of 5 warm runs.
// Usage: bench_tokenizer [assets_dir]   (default: TSR_TOKENIZER_ASSETS of the build)

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

// Deterministic generator (64-bit LCG) so every run encodes the same text.
class Lcg {
 public:
    std::uint32_t next() {
        state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<std::uint32_t>(state_ >> 33);
    }
    template <typename T>
    const T& pick(const std::vector<T>& v) { return v[next() % v.size()]; }

 private:
    std::uint64_t state_ = 0x7e55e7a;
};

const std::vector<std::string> kEnglish = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
    "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
    "model", "server", "request", "latency", "throughput", "batch", "token", "memory",
    "attention", "scheduler", "continuous", "inference", "streaming", "performance",
    "however", "therefore", "architecture", "implementation", "measurement", "distributed",
    "people", "government", "information", "development", "university", "international",
    "don't", "it's", "we're", "they'll", "Washington", "Tuesday", "2024", "3.14", "1,000"};
const std::vector<std::string> kChinese = {
    "我们", "模型", "推理", "服务器", "请求", "延迟", "吞吐量", "批处理", "内存", "注意力",
    "调度器", "连续", "流式", "性能", "的", "是", "在", "了", "和", "有", "这个", "中国",
    "北京", "大学", "自然语言处理", "人工智能", "今天", "天气", "很好"};
const std::vector<std::string> kCode = {
    "def encode(self, text):\n    return [self.vocab[t] for t in text.split()]\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "if err != nil {\n\t\treturn nil, fmt.Errorf(\"read %s: %w\", path, err)\n\t}\n",
    "const result = await fetch(`/v1/chat/completions`, { method: 'POST' });\n",
    "    std::vector<std::int32_t> ids = tokenizer.encode(prompt, true);\n",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY id;\n",
    "{\"model\": \"qwen3\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n"};
const std::vector<std::string> kEmoji = {"😀", "🚀", "👍🏽", "🎉", "👨‍👩‍👧‍👦", "🇯🇵", "❤️", "🤗"};

std::string made_up_word(Lcg& rng) {
    std::string w;
    const int n = 3 + static_cast<int>(rng.next() % 9);
    for (int i = 0; i < n; ++i) w += static_cast<char>('a' + rng.next() % 26);
    return w;
}

std::string build_text(std::size_t target_bytes) {
    Lcg rng;
    std::string text;
    while (text.size() < target_bytes) {
        const std::uint32_t kind = rng.next() % 100;
        if (kind < 60) {  // an English sentence
            const int n = 8 + static_cast<int>(rng.next() % 16);
            for (int i = 0; i < n; ++i) {
                text += i == 0 ? "" : " ";
                text += rng.next() % 10 == 0 ? made_up_word(rng) : rng.pick(kEnglish);
            }
            text += rng.next() % 4 == 0 ? ".\n\n" : ". ";
        } else if (kind < 80) {
            text += rng.pick(kCode);
        } else if (kind < 95) {
            const int n = 6 + static_cast<int>(rng.next() % 12);
            for (int i = 0; i < n; ++i) text += rng.pick(kChinese);
            text += "。";
        } else {
            text += " " + rng.pick(kEmoji) + rng.pick(kEmoji) + " ";
        }
    }
    return text;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
    const std::string assets = argc > 1 ? argv[1] : TSR_TOKENIZER_ASSETS;
    const std::string text = build_text(1 << 20);
    const double mb = static_cast<double>(text.size()) / 1e6;
    for (const std::string name : {"qwen3", "llama3", "deepseek_v3", "mistral"}) {
        auto t0 = std::chrono::steady_clock::now();
        auto loaded = tessera::tokenizer::Tokenizer::load(assets + "/" + name);
        if (!loaded.ok()) {
            std::fprintf(stderr, "%s: %s\n", name.c_str(), loaded.status().message().c_str());
            return 1;
        }
        const double load_s = seconds_since(t0);
        const auto& tok = *loaded.value();

        t0 = std::chrono::steady_clock::now();
        const std::size_t n_tokens = tok.encode(text, false).size();
        const double cold_s = seconds_since(t0);

        std::vector<double> warm;
        for (int run = 0; run < 5; ++run) {
            t0 = std::chrono::steady_clock::now();
            const auto ids = tok.encode(text, false);
            warm.push_back(seconds_since(t0));
            if (ids.size() != n_tokens) return 2;
        }
        std::sort(warm.begin(), warm.end());
        const double warm_s = warm[warm.size() / 2];

        t0 = std::chrono::steady_clock::now();
        const std::string back = tok.decode(tok.encode(text, false), false);
        const double roundtrip_s = seconds_since(t0);

        std::printf(
            "{\"bench\": \"tokenizer_encode\", \"tokenizer\": \"%s\", \"text_bytes\": %zu, "
            "\"tokens\": %zu, \"threads\": 1, \"load_s\": %.3f, \"cold_mb_s\": %.2f, "
            "\"warm_mb_s\": %.2f, \"warm_tokens_s\": %.0f, \"warm_runs\": %zu, "
            "\"encode_decode_s\": %.4f, \"roundtrip_exact\": %s}\n",
            name.c_str(), text.size(), n_tokens, load_s, mb / cold_s, mb / warm_s,
            static_cast<double>(n_tokens) / warm_s, warm.size(), roundtrip_s,
            back == text ? "true" : "false");
    }
    return 0;
}
