// libFuzzer target: a model folder's files from fuzz input: the bytes as model.safetensors
// (header, offsets, dtypes, shapes) and as config.json. Every outcome is a Status naming
// the file, never a crash or an out-of-bounds view.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "loader/model_config.h"
#include "loader/safetensors.h"
#include "models/model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::string dir = [] {
        std::string d = "/tmp/tessera_fuzz_" + std::to_string(::getpid());
        std::filesystem::create_directories(d);
        return d;
    }();
    {
        std::ofstream out(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    auto file = tessera::loader::SafetensorsFile::open(dir + "/model.safetensors");
    if (file.ok()) {
        volatile std::uint8_t sink = 0;
        for (const auto& [name, view] : (*file)->tensors())
            if (view.bytes > 0) sink = sink ^ static_cast<std::uint8_t>(view.data[view.bytes - 1]);
    }
    {
        std::ofstream out(dir + "/config.json", std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    (void)tessera::models::load_model({dir});
    return 0;
}
