#include "bench/model_bench.h"

#include <algorithm>

#include "base/logging.h"
#include <vector>

namespace tessera::bench {

StatusOr<BenchArgs> parse_bench_args(int argc, char** argv) {
    BenchArgs args;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag.rfind("--", 0) != 0 || i + 1 >= argc)
            return Status::InvalidArgument("expected --name value pairs, got '" + flag + "'");
        const std::string value = argv[++i];
        if (flag == "--model-path") {
            args.model_path = value;
        } else if (flag == "--dtype") {
            args.dtype = value;
        } else if (flag == "--quantization") {
            args.quantization = value;
        } else if (flag == "--threads") {
            args.threads = std::stoi(value);
        } else {
            try {
                args.numbers[flag.substr(2)] = std::stoll(value);
            } catch (const std::exception&) {
                return Status::InvalidArgument(flag + " expects an integer, got '" + value + "'");
            }
        }
    }
    if (args.model_path.empty())
        return Status::InvalidArgument("--model-path is required (e.g. a `tessera make-model --preset small` folder)");
    return args;
}

StatusOr<std::unique_ptr<models::Model>> load_bench_model(const BenchArgs& args) {
    return models::load_model({args.model_path, args.dtype, args.quantization});
}

std::optional<LoadedBench> load_bench(int argc, char** argv, int* exit_code) {
    auto args = parse_bench_args(argc, argv);
    if (!args.ok()) {
        TSR_LOG(ERROR, "{}", args.status().message());
        *exit_code = 2;
        return std::nullopt;
    }
    auto model = load_bench_model(*args);
    if (!model.ok()) {
        TSR_LOG(ERROR, "{}", model.status().message());
        *exit_code = 1;
        return std::nullopt;
    }
    return LoadedBench{std::move(args).value(), std::move(model).value()};
}

double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace tessera::bench
