#include "server/server_args.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>

namespace tessera::server {
namespace {

// Parses a command line through the flag table, as `tessera generate` does.
struct Parsed {
    ServerArgs args;
    Status status;
};

Parsed parse(std::vector<std::string> argv) {
    Parsed p;
    CLI::App app("test");
    FlagTable table(app, p.args, FlagTable::Mode::kServe);
    std::vector<std::string> args = {"--model-path", "/models/x"};
    args.insert(args.end(), argv.begin(), argv.end());
    p.status = table.parse(args);
    if (p.status.ok()) p.status = table.resolve();
    return p;
}

TEST(FlagTableTest, AliasesSetTheSameField) {
    for (const char* spelling : {"--tp", "--tp-size", "--tensor-parallel-size"}) {
        Parsed p = parse({spelling, "4"});
        EXPECT_EQ(p.args.tp_size, 4) << spelling;
    }
    for (const char* spelling : {"--ep", "--ep-size", "--expert-parallel-size"}) {
        EXPECT_EQ(parse({spelling, "2"}).args.ep_size, 2) << spelling;
    }
    EXPECT_EQ(parse({"--dist-init-addr", "127.0.0.1:5000"}).args.dist_init_addr, "127.0.0.1:5000");
    EXPECT_EQ(parse({"--nccl-init-addr", "127.0.0.1:5001"}).args.dist_init_addr, "127.0.0.1:5001");
    EXPECT_EQ(parse({"--threads", "3"}).args.threads_per_rank, 3);
}

TEST(FlagTableTest, DefaultsAreSglangs) {
    Parsed p = parse({});
    EXPECT_TRUE(p.status.ok());
    const ServerArgs& a = p.args;
    EXPECT_EQ(a.max_prefill_tokens, 16384);
    EXPECT_EQ(a.schedule_policy, "fcfs");
    EXPECT_EQ(a.schedule_conservativeness, 1.0);
    EXPECT_EQ(a.decode_log_interval, 40);
    EXPECT_EQ(a.eplb_rebalance_num_iterations, 1000);
    EXPECT_EQ(a.moe_a2a_backend, "none");
    EXPECT_FALSE(a.chunked_prefill_size.has_value());
    EXPECT_FALSE(a.mem_fraction_static.has_value());
}

TEST(FlagTableTest, ValidationRunsBeforeTheUnimplementedCheck) {
    // SGLang's own rule speaks first, as in SGLang.
    Parsed tbo = parse({"--enable-two-batch-overlap"});
    EXPECT_EQ(tbo.status.message().rfind("When enabling two batch overlap without an EP a2a backend", 0), 0u)
        << tbo.status.message();
    // Values that ask for nothing new pass; --enable-dp-attention with dp 1 is switched off by SGLang's rewrite.
    for (std::vector<std::string> same : std::vector<std::vector<std::string>>{
             {"--dp-size", "1"}, {"--ep-size", "1"}, {"--moe-a2a-backend", "none"}, {"--kv-cache-dtype", "auto"},
             {"--disable-overlap-schedule"}, {"--enable-dp-attention"}, {"--moe-dense-tp-size", "1"},
             {"--stream-interval", "1"}, {"--load-format", "safetensors"}, {"--speculative-accept-threshold-single", "1"}}) {
        Parsed p = parse(same);
        EXPECT_TRUE(p.status.ok()) << same.front() << ": " << p.status.to_string();
    }
    Parsed sbo = parse({"--enable-single-batch-overlap"});
    EXPECT_EQ(sbo.status.code(), StatusCode::kUnimplemented);
    EXPECT_EQ(sbo.status.message().rfind("--enable-single-batch-overlap true: tessera does not implement it yet", 0), 0u)
        << sbo.status.message();
    EXPECT_NE(sbo.status.message().find("or give false"), std::string::npos) << sbo.status.message();
    // Priority scheduling runs; SGLang's warnings become start-up notes.
    Parsed priority = parse({"--enable-priority-scheduling", "--schedule-policy", "lof", "--retraction-policy", "priority"});
    EXPECT_TRUE(priority.status.ok()) << priority.status.to_string();
    EXPECT_EQ(priority.args.notes, std::vector<std::string>{"--enable-priority-scheduling without --default-priority-value: "
                                                            "a request without a priority gets the worst one"});
    Parsed idle = parse({"--default-priority-value", "3", "--disable-priority-preemption"});
    EXPECT_TRUE(idle.status.ok()) << idle.status.to_string();
    EXPECT_EQ(idle.args.notes.size(), 2u);
    EXPECT_TRUE(parse({"--tp", "2", "--dp", "2", "--enable-dp-attention"}).status.ok()) << "DP-attention runs";
    EXPECT_TRUE(parse({"--dp", "2"}).status.ok()) << "replicas run";
    Parsed bootstrap = parse({"--dp", "2", "--load-balance-method", "follow_bootstrap_room"});
    EXPECT_NE(bootstrap.status.message().find("prefill-decode disaggregated"), std::string::npos)
        << bootstrap.status.message();
    Parsed spec = parse({"--speculative-algorithm", "EAGLE"});
    EXPECT_EQ(spec.status.message(),
              "--speculative-algorithm EAGLE: tessera does not implement speculative decoding; remove the flag");
    EXPECT_TRUE(parse({"--load-format", "dummy"}).status.ok());
    EXPECT_TRUE(parse({"--min-free-slots-delay", "4"}).status.ok());
    Parsed delayer = parse({"--enable-prefill-delayer", "--prefill-delayer-max-delay-passes", "5",
                            "--prefill-delayer-forward-passes-buckets", "1", "2", "--prefill-delayer-queue-min-ratio",
                            "0.3"});
    EXPECT_TRUE(delayer.status.ok()) << delayer.status.message();
    EXPECT_EQ(delayer.args.prefill_delayer_max_delay_passes, 5);
    EXPECT_EQ(delayer.args.prefill_delayer_forward_passes_buckets, (std::vector<double>{1, 2}));
    EXPECT_EQ(delayer.args.prefill_delayer_queue_min_ratio, 0.3);
    EXPECT_EQ(parse({"--enable-prefill-delayer", "--disable-overlap-schedule"}).status.message(),
              "To use PrefillDelayer, disable_overlap_schedule must be False: drop --disable-overlap-schedule, or "
              "drop --enable-prefill-delayer");
    EXPECT_NE(parse({"--enable-prefill-delayer", "--pp-size", "2"}).status.message().find(
                  "pipeline parallelism (--pp-size 2) turns overlap scheduling off"),
              std::string::npos);
    EXPECT_TRUE(parse({"--grammar-backend", "outlines", "--constrained-json-whitespace-pattern", "[ \\n]{0,2}"})
                    .status.ok());
    EXPECT_NE(parse({"--constrained-json-whitespace-pattern", "( "}).status.message().find(
                  "--constrained-json-whitespace-pattern: invalid regex at position 2: missing )"),
              std::string::npos);
    EXPECT_FALSE(parse({"--grammar-backend", "lark"}).status.ok());
    EXPECT_NE(parse({"--pp-size", "2", "--min-free-slots-delay", "4"})
                  .status.message()
                  .find("--min-free-slots-delay is not supported with pipeline parallelism"),
              std::string::npos);
    Parsed fmt = parse({"--load-format", "gguf"});
    EXPECT_NE(fmt.status.message().find("--load-format gguf is not supported: tessera reads safetensors folders"),
              std::string::npos)
        << fmt.status.message();
    EXPECT_TRUE(parse({"--dtype", "bfloat16"}).status.ok());
}

TEST(FlagTableTest, GpuFlagsAreAcceptedAndNamedAsIgnored) {
    ServerArgs args;
    CLI::App app("test");
    FlagTable table(app, args, FlagTable::Mode::kServe);
    std::vector<std::string> argv = {"--model-path", "/m", "--trust-remote-code", "--attention-backend", "fa3",
                                     "--cuda-graph-max-bs", "256", "--base-gpu-id", "1", "--watchdog-timeout", "3600"};
    ASSERT_TRUE(table.parse(argv).ok());
    ASSERT_TRUE(table.resolve().ok());
    const std::vector<std::string> ignored = table.ignored_flags();
    ASSERT_EQ(ignored.size(), 5u);
    EXPECT_EQ(ignored[0], "--base-gpu-id (tunes GPU machinery)");
    EXPECT_EQ(ignored[1], "--attention-backend (tunes GPU machinery)");
    EXPECT_EQ(ignored[2], "--trust-remote-code (tessera never runs code from a model folder)");
    // Their values are still checked as argparse checks them.
    EXPECT_FALSE(parse({"--attention-backend", "fa9"}).status.ok());
    EXPECT_FALSE(parse({"--cuda-graph-max-bs", "many"}).status.ok());
}

// SGLang defines --num-continuous-decode-steps but its scheduler never reads it: any count is
// accepted and named as having no effect, as a number.
TEST(FlagTableTest, ContinuousDecodeStepsHaveNoEffectAsInSglang) {
    ServerArgs args;
    CLI::App app("test");
    FlagTable table(app, args, FlagTable::Mode::kServe);
    ASSERT_TRUE(table.parse({"--model-path", "/m", "--num-continuous-decode-steps", "4"}).ok());
    ASSERT_TRUE(table.resolve().ok());
    ASSERT_TRUE(table.check_supported().ok());
    const std::vector<std::string> ignored = table.ignored_flags();
    ASSERT_EQ(ignored.size(), 1u);
    EXPECT_EQ(ignored[0], "--num-continuous-decode-steps (SGLang's scheduler does not read it either; only its "
                          "server_args.py defines it)");
    EXPECT_FALSE(parse({"--num-continuous-decode-steps", "two"}).status.ok());
}

// The memory saver is tessera's to implement; the CPU backups it takes on a GPU are named as
// having no effect (a resume reads the served folder again).
TEST(FlagTableTest, MemorySaverIsImplementedAndItsBackupsIgnored) {
    ServerArgs args;
    CLI::App app("test");
    FlagTable table(app, args, FlagTable::Mode::kServe);
    std::vector<std::string> argv = {"--model-path", "/m", "--enable-memory-saver", "--enable-weights-cpu-backup",
                                     "--enable-draft-weights-cpu-backup"};
    ASSERT_TRUE(table.parse(argv).ok());
    ASSERT_TRUE(table.resolve().ok());
    EXPECT_TRUE(args.enable_memory_saver);
    const std::vector<std::string> ignored = table.ignored_flags();
    ASSERT_EQ(ignored.size(), 2u);
    EXPECT_NE(ignored[0].find("reads the served folder again on /resume_memory_occupation"), std::string::npos)
        << ignored[0];
    EXPECT_FALSE(parse({}).args.enable_memory_saver);
}

// server_args.py _handle_deterministic_inference: the sampling backend rewritten, the attention
// backends SGLang refuses refused with its message, flashinfer's radix cache turned off.
TEST(FlagTableTest, DeterministicInferenceAsSglangResolvesIt) {
    Parsed plain = parse({"--enable-deterministic-inference", "--sampling-backend", "flashinfer"});
    ASSERT_TRUE(plain.status.ok()) << plain.status.message();
    EXPECT_TRUE(plain.args.enable_deterministic_inference);
    EXPECT_EQ(plain.args.sampling_backend, "pytorch");
    EXPECT_FALSE(plain.args.disable_radix_cache);
    ASSERT_FALSE(plain.args.notes.empty());
    EXPECT_EQ(plain.args.notes.front(), "Sampling backend is set to pytorch for deterministic inference.");

    for (const char* backend : {"fa3", "triton", "fa4"}) {
        Parsed p = parse({"--enable-deterministic-inference", "--attention-backend", backend});
        EXPECT_TRUE(p.status.ok() && !p.args.disable_radix_cache) << backend << ": " << p.status.message();
    }
    Parsed flashinfer = parse({"--enable-deterministic-inference", "--attention-backend", "flashinfer"});
    EXPECT_TRUE(flashinfer.status.ok() && flashinfer.args.disable_radix_cache) << flashinfer.status.message();
    EXPECT_EQ(flashinfer.args.notes.back(), "Currently radix cache is not compatible with flashinfer attention "
                                            "backend for deterministic inference. It will be supported in the future.");
    Parsed refused = parse({"--enable-deterministic-inference", "--attention-backend", "torch_native"});
    EXPECT_EQ(refused.status.message(),
              "Currently only ['ascend', 'fa3', 'fa4', 'flashinfer', 'intel_xpu', 'triton'] attention backends are "
              "supported for deterministic inference, but you explicitly specified 'torch_native'.");
    // Without the flag every backend name is accepted (no effect on CPU), and nothing is rewritten.
    Parsed off = parse({"--attention-backend", "torch_native", "--sampling-backend", "flashinfer"});
    EXPECT_TRUE(off.status.ok() && off.args.sampling_backend == "flashinfer" && !off.args.disable_radix_cache);
    Parsed tp = parse({"--enable-deterministic-inference", "--tp", "2"});
    ASSERT_TRUE(tp.status.ok()) << tp.status.message();
    EXPECT_NE(tp.args.notes.back().find("rank order"), std::string::npos) << tp.args.notes.back();
    // SGLang's --rl-on-policy-target (matching a trainer's numerics) stays refused by name.
    EXPECT_NE(parse({"--rl-on-policy-target", "fsdp"}).status.message().find("--rl-on-policy-target fsdp"),
              std::string::npos);
}

TEST(FlagTableTest, ServingFlagsTakeOnlyTheirDefaultsInGenerate) {
    ServerArgs args;
    CLI::App app("test");
    FlagTable table(app, args, FlagTable::Mode::kGenerate);
    ASSERT_TRUE(table.parse({"--model-path", "/m", "--port", "31000"}).ok());
    Status s = table.resolve();
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_EQ(s.message(), "--port 31000: `tessera serve` implements it, this command does not; remove the flag, or give 30000");
    EXPECT_TRUE(parse({"--port", "31000"}).status.ok()) << "serve implements it";

    // generate runs the scheduler, so its flags are accepted there.
    ServerArgs scheduled;
    CLI::App app2("test");
    FlagTable table2(app2, scheduled, FlagTable::Mode::kGenerate);
    ASSERT_TRUE(table2.parse({"--model-path", "/m", "--chunked-prefill-size", "2048", "--pp-size", "2"}).ok());
    EXPECT_TRUE(table2.resolve().ok());
}

TEST(FlagTableTest, ARepeatedFlagTakesTheLaterValueAsArgparseDoes) {
    Parsed p = parse({"--port", "30000", "--max-total-tokens", "100", "--port", "30001", "--max-total-tokens", "200"});
    ASSERT_TRUE(p.status.ok()) << p.status.to_string();
    EXPECT_EQ(p.args.port, 30001);
    EXPECT_EQ(p.args.max_total_tokens, 200);
}

TEST(FlagTableTest, TokenCountsTakeSglangsHumanReadableSuffixes) {
    Parsed p = parse({"--context-length", "32k", "--max-total-tokens", "1Ki", "--max-prefill-tokens", "25.6k"});
    ASSERT_TRUE(p.status.ok()) << p.status.to_string();
    EXPECT_EQ(p.args.context_length, 32000);
    EXPECT_EQ(p.args.max_total_tokens, 1024);
    EXPECT_EQ(p.args.max_prefill_tokens, 25600);
    EXPECT_EQ(parse({"--context-length", "4096"}).args.context_length, 4096);
    Parsed iec = parse({"--context-length", "1.5Ki"});
    EXPECT_NE(iec.status.message().find("Decimals are not allowed with IEC suffixes like 'Ki'"), std::string::npos)
        << iec.status.message();
    EXPECT_FALSE(parse({"--context-length", "1K"}).status.ok()) << "suffixes are case-sensitive, as in SGLang";
}

TEST(FlagTableTest, ChoicesAreChecked) {
    EXPECT_FALSE(parse({"--schedule-policy", "sjf"}).status.ok());
    EXPECT_FALSE(parse({"--moe-a2a-backend", "nccl"}).status.ok());
    for (const char* policy : {"lru", "lfu", "slru", "priority"}) {
        Parsed p = parse({"--radix-eviction-policy", policy});
        EXPECT_TRUE(p.status.ok()) << policy << ": " << p.status.to_string();
        EXPECT_EQ(p.args.radix_eviction_policy, policy);
    }
    EXPECT_FALSE(parse({"--radix-eviction-policy", "fifo"}).status.ok()) << "not among SGLang's choices";
}

// SGLang's rules, then what this build runs, as `tessera serve` applies them.
Status resolve_and_check(ServerArgs& a) {
    Status s = a.resolve();
    return s.ok() ? a.check_tessera_runs() : s;
}

// One test per rule of reference §1.4-§1.7: the message names the flags.
struct Rule {
    const char* name;
    std::function<void(ServerArgs&)> set;
    const char* message;
};

TEST(ServerArgsTest, EveryValidationRule) {
    const Rule rules[] = {
        {"nodes divide ranks", [](ServerArgs& a) { a.tp_size = 3; a.nnodes = 2; a.dist_init_addr = "h:1"; },
         "tp_size must be divisible by number of nodes"},
        {"multi-node DP", [](ServerArgs& a) { a.tp_size = 2; a.dp_size = 3; a.nnodes = 2; a.dist_init_addr = "h:1"; },
         "--dp-size 3 replicas cannot be placed on --nnodes 2"},
        {"dp attention divisibility", [](ServerArgs& a) { a.tp_size = 4; a.dp_size = 3; a.enable_dp_attention = true; },
         "--enable-dp-attention needs --tp-size divisible by --dp-size"},
        {"attn cp divides tp", [](ServerArgs& a) { a.tp_size = 4; a.attn_cp_size = 3; },
         "tp_size must be divisible by attn_cp_size"},
        {"moe dense tp", [](ServerArgs& a) { a.tp_size = 4; a.moe_dense_tp_size = 2; },
         "moe_dense_tp_size only supports None, 1, or tp_size"},
        {"moe dp with pp", [](ServerArgs& a) { a.tp_size = 4; a.pp_size = 2; a.moe_dp_size = 2; },
         "PP is not supported with context parallelism"},
        {"mixed chunk with pp", [](ServerArgs& a) { a.pp_size = 2; a.enable_mixed_chunk = true; },
         "Pipeline parallelism is not compatible with overlap schedule, speculative decoding, mixed chunked prefill"},
        {"micro batch size", [](ServerArgs& a) { a.pp_max_micro_batch_size = 0; },
         "--pp-max-micro-batch-size must be at least 1"},
        {"stream interval", [](ServerArgs& a) { a.stream_interval = 0; }, "--stream-interval must be at least 1"},
        {"recv interval", [](ServerArgs& a) { a.scheduler_recv_interval = 0; },
         "--scheduler-recv-interval must be at least 1"},
        {"chunk vs page", [](ServerArgs& a) { a.chunked_prefill_size = 100; a.page_size = 64; },
         "chunked_prefill_size must be divisible by page_size"},
        {"conservativeness", [](ServerArgs& a) { a.schedule_conservativeness = -0.5; },
         "--schedule-conservativeness must be >= 0"},
        {"prefill decode interval", [](ServerArgs& a) { a.prefill_decode_interval = -1; },
         "--prefill-decode-interval must be >= 0"},
        {"base gpu id", [](ServerArgs& a) { a.base_gpu_id = -1; }, "--base-gpu-id must be >= 0"},
        {"gpu id step", [](ServerArgs& a) { a.gpu_id_step = 0; }, "--gpu-id-step must be >= 1"},
        {"template kwargs", [](ServerArgs& a) { a.default_chat_template_kwargs = "[1]"; },
         "--default-chat-template-kwargs [1]: give a JSON object"},
        {"queue cap", [](ServerArgs& a) { a.max_queued_requests = 0; }, "--max-queued-requests must be at least 1"},
        {"reasoning parser", [](ServerArgs& a) { a.reasoning_parser = "gpt-oss"; },
         "--reasoning-parser gpt-oss: tessera parses"},
        {"chat template", [](ServerArgs& a) { a.chat_template = "vicuna"; },
         "--chat-template vicuna: not a built-in template name or a valid chat template file path; SGLang's "
         "built-in names are llama-2, mistral, devstral"},
        {"priority policy", [](ServerArgs& a) { a.enable_priority_scheduling = true; a.schedule_policy = "lpm"; },
         "--enable-priority-scheduling requires --schedule-policy fcfs or lof"},
        {"priority retraction", [](ServerArgs& a) { a.retraction_policy = "priority"; },
         "--retraction-policy priority requires --enable-priority-scheduling"},
        {"dp lm head", [](ServerArgs& a) { a.tp_size = 2; a.dp_size = 2; a.enable_dp_lm_head = true; },
         "Please enable dp attention when setting enable_dp_lm_head"},
        {"two batch overlap", [](ServerArgs& a) { a.enable_two_batch_overlap = true; },
         "--enable-dp-attention is required"},
        {"shared experts fusion", [](ServerArgs& a) { a.disable_shared_experts_fusion = a.enforce_shared_experts_fusion = true; },
         "mutually exclusive"},
        {"lp dispatch", [](ServerArgs& a) { a.ep_dispatch_algorithm = "lp"; }, "--ep-dispatch-algorithm lp"},
        {"vectorised eplb", [](ServerArgs& a) { a.eplb_algorithm = "deepseek_vec"; }, "--eplb-algorithm deepseek_vec"},
        {"eplb period", [](ServerArgs& a) { a.eplb_rebalance_num_iterations = 0; },
         "--eplb-rebalance-num-iterations must be at least 1"},
        {"eplb chunk", [](ServerArgs& a) { a.eplb_rebalance_layers_per_chunk = 0; },
         "--eplb-rebalance-layers-per-chunk must be at least 1"},
        {"recorder buffer", [](ServerArgs& a) { a.expert_distribution_recorder_buffer_size = 0; },
         "-1 for an unbounded buffer"},
        {"eplb needs ep", [](ServerArgs& a) { a.enable_eplb = true; }, "--enable-eplb requires --ep-size > 1"},
        {"eplb window", [](ServerArgs& a) { a.tp_size = 2; a.ep_size = 2; a.enable_eplb = true;
                                            a.expert_distribution_recorder_buffer_size = 2000; },
         "eplb_rebalance_num_iterations must be greater than expert_distribution_recorder_buffer_size"},
        {"pplx mode", [](ServerArgs& a) { a.moe_a2a_backend = "pplx"; a.deepep_mode = "normal"; },
         "moe_a2a_backend='pplx' only supports low-latency mode"},
        {"pplx dp groups", [](ServerArgs& a) { a.moe_a2a_backend = "pplx"; },
         "requires --enable-dp-attention with at least 2 DP groups"},
        {"flashinfer a2a", [](ServerArgs& a) { a.tp_size = 2; a.moe_a2a_backend = "flashinfer"; },
         "--moe-a2a-backend flashinfer requires --enable-dp-attention"},
        {"flashinfer runner ep", [](ServerArgs& a) { a.tp_size = 4; a.ep_size = 2; a.moe_runner_backend = "flashinfer_cutlass"; },
         "The expert parallel size must be 1 or the same as the tensor parallel size"},
        {"mem fraction", [](ServerArgs& a) { a.mem_fraction_static = 1.5; }, "--mem-fraction-static must be in (0, 1]"},
        {"multi-node needs address", [](ServerArgs& a) { a.tp_size = 2; a.nnodes = 2; }, "needs --dist-init-addr"},
        {"quantization method", [](ServerArgs& a) { a.quantization = "awq"; },
         "--quantization awq is not supported: tessera runs fp8"},
        {"kv cache dtype", [](ServerArgs& a) { a.kv_cache_dtype = "nvfp4"; },
         "--kv-cache-dtype nvfp4 is not supported: tessera stores auto"},
    };
    for (const Rule& rule : rules) {
        ServerArgs a;
        a.model_path = "/m";
        rule.set(a);
        Status s = resolve_and_check(a);
        ASSERT_FALSE(s.ok()) << rule.name;
        EXPECT_NE(s.message().find(rule.message), std::string::npos) << rule.name << ": " << s.message();
    }
}

// template_manager.py _load_explicit_chat_template: .jinja is a Jinja template, any other file a
// JSON conversation template (read at start-up), a built-in name needs no file.
TEST(ServerArgsTest, ChatTemplateIsANameAJinjaFileOrAJsonTemplate) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("tsr_chat_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto write = [&](const std::string& name, const std::string& text) {
        std::ofstream(dir / name) << text;
        return (dir / name).string();
    };
    const auto check = [](const std::string& chat_template) {
        ServerArgs a;
        a.model_path = "/m";
        a.chat_template = chat_template;
        return resolve_and_check(a);
    };
    EXPECT_TRUE(check("chatml").ok());
    EXPECT_TRUE(check(write("t.jinja", "{{ messages[0]['content'] }}")).ok());
    const std::string good = write("good.json", R"({"name": "m", "system": "<|im_start|>system", "user": "U",
        "assistant": "A", "sep_style": "CHATML", "sep": "<|im_end|>", "stop_str": ["<|im_end|>"]})");
    EXPECT_TRUE(check(good).ok()) << check(good).message();
    const std::string text = write("t.txt", "{{ x }}");
    EXPECT_NE(check(text).message().find("--chat-template " + text + ": unrecognized format of chat template file"),
              std::string::npos) << check(text).message();
    const std::string style = write("style.json", R"({"name": "m", "system": "", "user": "U", "assistant": "A",
        "sep_style": "CHATMLX", "stop_str": null})");
    EXPECT_NE(check(style).message().find("Unknown separator style: CHATMLX (one of ADD_COLON_SINGLE"),
              std::string::npos) << check(style).message();
    const std::string missing = write("missing.json", R"({"name": "m", "system": "", "user": "U", "assistant": "A",
        "sep_style": "CHATML"})");
    EXPECT_NE(check(missing).message().find("the template needs \"stop_str\""), std::string::npos)
        << check(missing).message();
    const std::string braces = write("braces.json", R"({"name": "m", "system": "{role}", "user": "U",
        "assistant": "A", "sep_style": "CHATML", "stop_str": []})");
    EXPECT_NE(check(braces).message().find("has the field {role}"), std::string::npos) << check(braces).message();
    std::filesystem::remove_all(dir);
}

TEST(ServerArgsTest, RewritesDefaultsAsSglang) {
    ServerArgs a;
    a.model_path = "/m";
    a.tp_size = 8;
    a.dp_size = 4;
    a.enable_dp_attention = true;
    a.chunked_prefill_size = 8192;
    a.moe_a2a_backend = "all_to_all";
    ASSERT_TRUE(a.resolve().ok());
    EXPECT_DOUBLE_EQ(a.schedule_conservativeness, 0.3);
    EXPECT_EQ(*a.chunked_prefill_size, 2048);
    EXPECT_EQ(a.ep_size, 8) << "an all-to-all dispatcher spans the TP group";
    ASSERT_EQ(a.notes.size(), 2u);
    EXPECT_NE(a.notes[1].find("spans the TP group: ep_size set to tp_size (8)"), std::string::npos) << a.notes[1];
    EXPECT_EQ(a.tokenizer_path, "/m");
    EXPECT_EQ(a.served_model_name, "m") << "the folder's name, not its path";
    EXPECT_EQ(*a.page_size, 1);

    ServerArgs b;
    b.model_path = "/m";
    b.pp_size = 2;
    b.dp_size = 1;
    b.enable_dp_attention = true;
    b.tp_size = 2;
    b.ep_size = 2;
    b.enable_eplb = true;
    ASSERT_TRUE(b.resolve().ok());
    EXPECT_TRUE(b.disable_overlap_schedule);
    EXPECT_FALSE(b.enable_dp_attention) << "dp_size 1 turns DP attention off";
    EXPECT_EQ(b.expert_distribution_recorder_mode, "stat");
    EXPECT_EQ(*b.expert_distribution_recorder_buffer_size, 1000);
    EXPECT_EQ(b.ep_dispatch_algorithm, "static") << "SGLang's _handle_eplb_and_dispatch";
}

TEST(ServerArgsTest, GpuOnlyMoeBackendsNameWhatThisBuildRuns) {
    for (const char* backend : {"mooncake", "mori", "megamoe"}) {
        ServerArgs a;
        a.model_path = "/m";
        a.tp_size = 2;
        a.moe_a2a_backend = backend;
        Status s = resolve_and_check(a);
        ASSERT_FALSE(s.ok()) << backend;
        EXPECT_NE(s.message().find("this build supports none (masked EP, then the TP all-reduce), all_to_all (tokens "
                                   "sent only to their experts' ranks) and deepep (run as all_to_all"),
                  std::string::npos)
            << s.message();
    }
    // DeepEP's exchange is all_to_all's: it runs, EP spanning the TP group as SGLang sets it.
    ServerArgs d;
    d.model_path = "/m";
    d.tp_size = 2;
    d.moe_a2a_backend = "deepep";
    d.deepep_mode = "low_latency";
    const Status deepep = resolve_and_check(d);
    EXPECT_TRUE(deepep.ok()) << deepep.to_string();
    EXPECT_EQ(d.ep_size, 2);
    // An expert kernel backend is GPU machinery: accepted (named as having no effect).
    ServerArgs r;
    r.model_path = "/m";
    r.moe_runner_backend = "deep_gemm";
    EXPECT_TRUE(resolve_and_check(r).ok());
}

TEST(FlagTableTest, MoeKernelBackendsAndDeepepModesAreNamedAsIgnored) {
    ServerArgs args;
    CLI::App app("test");
    FlagTable table(app, args, FlagTable::Mode::kServe);
    ASSERT_TRUE(table.parse({"--model-path", "/m", "--tp", "2", "--moe-a2a-backend", "deepep", "--deepep-mode",
                             "low_latency", "--moe-runner-backend", "deep_gemm"})
                    .ok());
    ASSERT_TRUE(table.resolve().ok());
    const std::vector<std::string> ignored = table.ignored_flags();
    ASSERT_EQ(ignored.size(), 2u);
    EXPECT_EQ(ignored[0], "--moe-runner-backend (tunes GPU machinery)");
    EXPECT_EQ(ignored[1], "--deepep-mode (tunes GPU machinery)");
    EXPECT_EQ(args.ep_size, 2);
    EXPECT_FALSE(parse({"--deepep-mode", "fast"}).status.ok());
    EXPECT_FALSE(parse({"--moe-runner-backend", "cuda"}).status.ok());
    // Fusing the shared experts into the routed kernel computes the same sum: no effect here,
    // but SGLang's rule against also disabling it still holds.
    Parsed fused = parse({"--enforce-shared-experts-fusion"});
    EXPECT_TRUE(fused.status.ok()) << fused.status.to_string();
    Parsed both = parse({"--enforce-shared-experts-fusion", "--disable-shared-experts-fusion"});
    EXPECT_FALSE(both.status.ok());
}

}  // namespace
}  // namespace tessera::server
