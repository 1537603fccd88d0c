#include "server/command_line.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "server/server_args.h"
#include "server/sglang_flags.h"

namespace tessera::server {
namespace {

const std::vector<KnownFlag> kKnown = {
    {"--tp-size", true}, {"--tensor-parallel-size", true}, {"--pp-size", true}, {"--pp-max-micro-batch-size", true},
    {"--dp-size", true}, {"--trust-remote-code", false}, {"--model-path", true}, {"--model", true},
    {"--served-model-name", true},
};

std::vector<std::string> expand(std::vector<std::string> args) {
    auto r = expand_abbreviations(args, kKnown);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value() : std::vector<std::string>{};
}

TEST(AbbreviationTest, AUniquePrefixStandsForItsFlag) {
    EXPECT_EQ(expand({"--tp", "2", "--dp=4", "--trust-remote"}),
              (std::vector<std::string>{"--tp-size", "2", "--dp-size=4", "--trust-remote-code"}));
    // An exact name wins over the longer names it prefixes (argparse checks exact names first).
    EXPECT_EQ(expand({"--model", "m"}), (std::vector<std::string>{"--model", "m"}));
}

TEST(AbbreviationTest, AmbiguousAndUnknownPrefixesAreArgparsesErrors) {
    auto ambiguous = expand_abbreviations({"--pp", "2"}, kKnown);
    ASSERT_FALSE(ambiguous.ok());
    EXPECT_EQ(ambiguous.status().message(), "ambiguous option: --pp could match --pp-size, --pp-max-micro-batch-size");
    auto unknown = expand_abbreviations({"--tpx", "2"}, kKnown);
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.status().message().find("unrecognized arguments: --tpx"), std::string::npos);
}

TEST(AbbreviationTest, ValuesAndArgumentsAfterDoubleDashAreLeftAlone) {
    EXPECT_EQ(expand({"--served-model-name", "--tp", "--tp", "1", "--", "--dp"}),
              (std::vector<std::string>{"--served-model-name", "--tp", "--tp-size", "1", "--", "--dp"}));
}

// The catalogue of SGLang's flags against the table tessera registers.
TEST(SglangFlagsTest, EveryFlagOfSglangIsKnownOnce) {
    const std::vector<SglangFlag>& flags = sglang_flags();
    EXPECT_EQ(flags.size(), 497u) << "server_args.py @001067ff: 468 fields and 29 manual entries";
    ServerArgs args;
    CLI::App app("serve");
    FlagTable table(app, args, FlagTable::Mode::kServe);
    std::set<std::string> registered;
    for (const CLI::Option* o : app.get_options())
        for (const std::string& l : o->get_lnames()) EXPECT_TRUE(registered.insert("--" + l).second) << l;
    std::set<std::string> catalogue;
    for (const SglangFlag& f : flags) {
        for (const std::string& n : f.names) {
            EXPECT_TRUE(registered.count(n)) << n << " is not registered";
            EXPECT_TRUE(catalogue.insert(n).second) << n << " twice in sglang_flags.tsv";
        }
        if (f.tessera == SglangFlag::Tessera::kNotImplemented && f.kind == SglangFlag::Kind::kValue) {
            EXPECT_TRUE(f.is_neutral(f.default_text())) << f.names.front();
        }
    }
    // SGLang's argparse abbreviations seen in its docs read as SGLang reads them.
    std::vector<KnownFlag> known;
    for (const std::string& n : registered) known.push_back({n, true});
    auto r = expand_abbreviations({"--tp", "1", "--dp", "1", "--conf", "x", "--speculative-algo", "x", "--moe-dense-tp",
                                   "1", "--trust-remote", "1"},
                                  known);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r.value()[0], "--tp-size");
    EXPECT_EQ(r.value()[2], "--dp-size");
    EXPECT_EQ(r.value()[4], "--config");
    EXPECT_EQ(r.value()[6], "--speculative-algorithm");
    EXPECT_EQ(r.value()[8], "--moe-dense-tp-size");
    EXPECT_EQ(r.value()[10], "--trust-remote-code");
    EXPECT_FALSE(expand_abbreviations({"--pp", "2"}, known).ok()) << "three --pp-* flags, as in SGLang";
}

TEST(SglangFlagsTest, NeutralValuesCompareAsSglangsDefault) {
    for (const SglangFlag& f : sglang_flags()) {
        if (f.names.front() == "--speculative-accept-threshold-single") {
            EXPECT_TRUE(f.is_neutral("1"));
            EXPECT_TRUE(f.is_neutral("1.0"));
            EXPECT_FALSE(f.is_neutral("0.5"));
        }
        if (f.names.front() == "--cpu-offload-gb") {
            EXPECT_TRUE(f.is_neutral("0"));
            EXPECT_FALSE(f.is_neutral("8"));
        }
    }
}

// A launch read as `tessera serve` reads it.
struct Launch {
    ServerArgs args;
    Status status;
    std::vector<std::string> ignored;
};

Launch launch(const std::vector<std::string>& argv) {
    Launch out;
    CLI::App app("serve");
    FlagTable table(app, out.args, FlagTable::Mode::kServe);
    out.status = table.parse(argv);
    if (!out.status.ok()) return out;
    out.status = table.resolve();
    out.ignored = table.ignored_flags();
    return out;
}

// Tuning of SGLang's Python tokenizer manager, and a Hub revision of a local folder, ask
// nothing of tessera: accepted, and named in the start-up line about ignored flags.
TEST(IgnoredFlagsTest, TokenizerBatchingAndRevisionAreAcceptedAndNamed) {
    const Launch l = launch({"--model-path", "/m", "--revision", "v2", "--enable-dynamic-batch-tokenizer",
                             "--dynamic-batch-tokenizer-batch-size", "64", "--enable-tokenizer-batch-encode",
                             "--disable-tokenizer-batch-decode"});
    ASSERT_TRUE(l.status.ok()) << l.status.to_string();
    ASSERT_EQ(l.ignored.size(), 5u);
    EXPECT_EQ(l.ignored[0].rfind("--revision (tessera reads the --model-path folder as it is", 0), 0u) << l.ignored[0];
    EXPECT_NE(l.ignored[4].find("detokenizes each output stream natively"), std::string::npos) << l.ignored[4];
}

class ConfigFileTest : public ::testing::Test {
 protected:
    std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                                 ("tessera_config_test_" + std::to_string(::getpid()));
    void SetUp() override { std::filesystem::create_directories(dir_); }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
        return (dir_ / name).string();
    }
};

TEST_F(ConfigFileTest, KeysAreFlagsAndTheCommandLineWins) {
    const std::string path = write("c.yaml",
                                   "model-path: /models/m   # a comment\n"
                                   "tensor-parallel-size: 2\n"
                                   "port: 30000\n"
                                   "enable-metrics: true\n"
                                   "disable-radix-cache: false\n"
                                   "trust-remote-code: yes\n"
                                   "cuda-graph-bs: [1, 2, 4]\n"
                                   "tp: 2\n");
    Launch l = launch({"--config", path, "--port", "31000"});
    ASSERT_TRUE(l.status.ok()) << l.status.to_string();
    EXPECT_EQ(l.args.model_path, "/models/m");
    EXPECT_EQ(l.args.tp_size, 2);
    EXPECT_EQ(l.args.port, 31000) << "the command line overrides the file";
    EXPECT_TRUE(l.args.enable_metrics);
    EXPECT_FALSE(l.args.disable_radix_cache) << "false leaves a switch out, as SGLang";
    EXPECT_EQ(l.ignored.size(), 2u);
    // --config=FILE and the abbreviation --conf read the file too (SGLang ignores both silently).
    EXPECT_EQ(launch({"--config=" + path}).args.tp_size, 2);
    EXPECT_EQ(launch({"--conf", path}).args.tp_size, 2);
}

TEST_F(ConfigFileTest, BadFilesAreRefusedWithSglangsMessages) {
    auto message = [&](std::vector<std::string> argv) { return launch(argv).status.message(); };
    EXPECT_EQ(message({"--config", write("c.json", "{}")}).rfind("Config file must be YAML format, got: .json", 0), 0u);
    EXPECT_EQ(message({"--config", (dir_ / "none.yaml").string()}), "Config file not found: " + (dir_ / "none.yaml").string());
    EXPECT_NE(message({"--config", write("list.yaml", "- a\n- b\n")}).find("Config file must contain a dictionary at root level"),
              std::string::npos);
    EXPECT_NE(message({"--config", write("bad.yaml", "tp-size: [1, 2\n")}).find("Failed to read config file"),
              std::string::npos);
    EXPECT_NE(message({"--config", write("nested.yaml", "model-path: /m\ncuda-graph-config:\n  decode: 1\n")})
                  .find("'cuda-graph-config' holds a nested mapping; write it as a JSON string"),
              std::string::npos);
    const std::string ok = write("ok.yaml", "model-path: /m\n");
    EXPECT_EQ(message({"--config", ok, "--config", ok}), "Multiple config files specified! Only one allowed.");
    EXPECT_EQ(message({"--config"}), "No config file specified after --config flag!");
    EXPECT_NE(message({"--config", write("under.yaml", "model-path: /m\ntp_size: 2\n")}).find("unrecognized arguments: --tp_size"),
              std::string::npos)
        << "keys are spelled with dashes, as SGLang requires";
    EXPECT_TRUE(launch({"--config", write("empty.yaml", "")}).status.message().find("model-path") != std::string::npos)
        << "an empty file gives no arguments";
}

}  // namespace
}  // namespace tessera::server
