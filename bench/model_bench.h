#pragma once
// bench/model_bench.h — what the model benchmarks share: flag parsing (--model-path,
// --threads, --dtype and numbers) and loading the model. Benchmarks print JSON on stdout.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "models/model.h"

namespace tessera::bench {

struct BenchArgs {
    std::string model_path;
    std::string dtype = "auto";
    std::string quantization;  // --quantization (fp8: quantize an unquantized checkpoint at load)
    int threads = 2;
    std::map<std::string, std::int64_t> numbers;  // --steps, --prompt-len, --repeats ...

    std::int64_t number(const std::string& name, std::int64_t fallback) const {
        auto it = numbers.find(name);
        return it == numbers.end() ? fallback : it->second;
    }
};

// Parses --model-path DIR --dtype D --quantization Q --threads N and any other --name INTEGER.
StatusOr<BenchArgs> parse_bench_args(int argc, char** argv);

StatusOr<std::unique_ptr<models::Model>> load_bench_model(const BenchArgs& args);

struct LoadedBench {
    BenchArgs args;
    std::unique_ptr<models::Model> model;
};

// parse_bench_args + load_bench_model; on failure logs the error and sets *exit_code
// (2: bad flags, 1: the model would not load).
std::optional<LoadedBench> load_bench(int argc, char** argv, int* exit_code);

double median(std::vector<double> values);

}  // namespace tessera::bench
