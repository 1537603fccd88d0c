// Real SGLang launch commands (tests/data/sglang_launch_commands.txt, each with its source):
// read exactly as `tessera serve` reads its arguments, then either resolved to the sizes
// SGLang's rules give or refused with the expected rule.

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "server/server_args.h"

namespace tessera::server {
namespace {

struct LaunchCase {
    std::string source;
    std::string command;
    std::string expect;  // "ok tp=8 pp=1 ..." or "refused <text of the message>"
    int line = 0;
};

// POSIX shell words: quotes and backslashes; $VARS stay as written.
std::vector<std::string> shell_words(const std::string& s) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    char quote = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (quote) {
            if (c == quote) quote = 0;
            else word += c;
        } else if (c == '\'' || c == '"') {
            quote = c;
            in_word = true;
        } else if (c == '\\' && i + 1 < s.size()) {
            word += s[++i];
            in_word = true;
        } else if (c == ' ' || c == '\t') {
            if (in_word) words.push_back(word);
            word.clear();
            in_word = false;
        } else {
            word += c;
            in_word = true;
        }
    }
    if (in_word) words.push_back(word);
    return words;
}

struct Corpus {
    std::vector<LaunchCase> cases;
    std::map<std::string, std::string> yaml_files;  // name -> text
};

Corpus read_corpus() {
    Corpus corpus;
    std::ifstream in(std::string(TSR_SOURCE_DIR) + "/tests/data/sglang_launch_commands.txt");
    std::string line, source, yaml_name;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        if (!yaml_name.empty()) {
            if (line.empty()) yaml_name.clear();
            else if (line[0] != '#') corpus.yaml_files[yaml_name] += line + "\n";
            continue;
        }
        if (line.rfind("# source:", 0) == 0) source = line.substr(10);
        if (line.rfind("# yaml for --config: ", 0) == 0) yaml_name = line.substr(21);
        if (line.rfind("# expect: ", 0) == 0) {
            EXPECT_FALSE(corpus.cases.empty()) << "line " << number << ": an expectation before any command";
            if (!corpus.cases.empty()) corpus.cases.back().expect = line.substr(10);
        }
        if (line.rfind("python", 0) == 0 || line.rfind("sglang serve", 0) == 0)
            corpus.cases.push_back({source, line, "", number});
    }
    return corpus;
}

struct Outcome {
    Status status;
    ServerArgs args;
};

Outcome launch(std::vector<std::string> words) {
    // Everything up to the launcher's module (or `sglang serve`) is the interpreter.
    auto start = std::find_if(words.begin(), words.end(),
                              [](const std::string& w) { return w == "sglang.launch_server" || w == "serve"; });
    words.erase(words.begin(), start == words.end() ? words.begin() : start + 1);
    Outcome out;
    CLI::App app("serve");
    FlagTable table(app, out.args, FlagTable::Mode::kServe);
    out.status = table.parse(words);
    if (out.status.ok()) out.status = table.resolve();
    return out;
}

std::string sizes(const ServerArgs& a) {
    std::ostringstream s;
    s << "tp=" << a.tp_size << " pp=" << a.pp_size << " dp=" << a.dp_size << " ep=" << a.ep_size
      << " nnodes=" << a.nnodes;
    return s.str();
}

TEST(LaunchCommandsTest, EachCommandRunsOrIsRefusedWithItsRule) {
    Corpus corpus = read_corpus();
    ASSERT_GE(corpus.cases.size(), 60u);
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("tessera_launch_commands_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const auto& [name, text] : corpus.yaml_files) std::ofstream(dir / name) << text;
    int ran = 0, refused = 0;
    for (const LaunchCase& c : corpus.cases) {
        SCOPED_TRACE("line " + std::to_string(c.line) + " (" + c.source + "): " + c.command);
        std::vector<std::string> words = shell_words(c.command);
        for (std::size_t i = 0; i + 1 < words.size(); ++i)
            if (words[i] == "--config" && corpus.yaml_files.count(words[i + 1])) words[i + 1] = (dir / words[i + 1]).string();
        const Outcome out = launch(words);
        const std::string got = out.status.ok() ? "ok " + sizes(out.args) : "refused " + out.status.message();
        ASSERT_FALSE(c.expect.empty()) << "no expectation; got: " << got;
        if (c.expect.rfind("ok ", 0) == 0) {
            ++ran;
            EXPECT_EQ(got, c.expect);
        } else {
            ++refused;
            ASSERT_EQ(c.expect.rfind("refused ", 0), 0u) << c.expect;
            EXPECT_FALSE(out.status.ok()) << got;
            EXPECT_NE(got.find(c.expect.substr(8)), std::string::npos) << got;
        }
    }
    std::filesystem::remove_all(dir);
    EXPECT_GT(ran, 10);
    EXPECT_GT(refused, 10);
}

}  // namespace
}  // namespace tessera::server
