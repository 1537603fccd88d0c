#include "tokenizer/gpt2_style.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tessera::tokenizer {

namespace fs = std::filesystem;

Status write_gpt2_style_tokenizer(const std::string& src_dir, const std::string& dst_dir) {
    const fs::path src = fs::path(src_dir) / "tokenizer.json";
    std::ifstream in(src);
    if (!in) return Status::NotFound(src.string() + ": cannot open");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        return Status::InvalidArgument(src.string() + ": not valid JSON: " + e.what());
    }
    if (!j.contains("model") || j["model"].value("type", "") != "BPE" || !j.contains("decoder") ||
        j["decoder"].value("type", "") != "ByteLevel")
        return Status::InvalidArgument(src.string() + ": not a byte-level BPE tokenizer (model BPE, decoder ByteLevel)");
    // Hugging Face's serialization of GPT-2's own tokenizer.json.
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
    j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    std::error_code ec;
    fs::create_directories(dst_dir, ec);
    if (ec) return Status::Internal(dst_dir + ": cannot create folder: " + ec.message());
    const fs::path dst = fs::path(dst_dir) / "tokenizer.json";
    std::ofstream out(dst);
    out << j.dump();
    out.close();
    if (!out) return Status::Internal(dst.string() + ": write failed");
    fs::copy_file(fs::path(src_dir) / "tokenizer_config.json", fs::path(dst_dir) / "tokenizer_config.json",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::Internal(dst_dir + "/tokenizer_config.json: copy failed: " + ec.message());
    fs::permissions(fs::path(dst_dir) / "tokenizer_config.json", fs::perms::owner_write, fs::perm_options::add, ec);
    return Status::Ok();
}

}  // namespace tessera::tokenizer
