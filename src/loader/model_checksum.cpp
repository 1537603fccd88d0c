#include "loader/model_checksum.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/sha256.h"

namespace tessera::loader {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct Expected {
    std::string name;
    std::string sha256;
    std::optional<std::uint64_t> size;
};

bool is_sha256(const std::string& s) {
    return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
           });
}

StatusOr<std::vector<Expected>> read_manifest(const std::string& path) {
    std::ifstream in(path);
    if (!in) return Status::InvalidArgument("--model-checksum " + path + ": cannot read the file");
    const Json j = Json::parse(in, nullptr, false);
    const auto bad = [&](const std::string& what) {
        return Status::InvalidArgument("--model-checksum " + path + ": " + what +
                                       "; expected {\"files\": {NAME: {\"sha256\": HEX, \"size\": BYTES}}} or "
                                       "{\"checksums\": {NAME: HEX}}");
    };
    if (!j.is_object()) return bad("not a JSON object");
    std::vector<Expected> files;
    if (const auto it = j.find("files"); it != j.end()) {
        if (!it->is_object()) return bad("\"files\" is not an object");
        for (const auto& [name, entry] : it->items()) {
            if (!entry.is_object() || !entry.contains("sha256") || !entry["sha256"].is_string())
                return bad("\"" + name + "\" has no \"sha256\" string");
            Expected e{name, entry["sha256"].get<std::string>(), std::nullopt};
            if (entry.contains("size")) {
                if (!entry["size"].is_number_unsigned()) return bad("\"" + name + "\" has a \"size\" that is not a byte count");
                e.size = entry["size"].get<std::uint64_t>();
            }
            files.push_back(std::move(e));
        }
    } else if (const auto legacy = j.find("checksums"); legacy != j.end()) {
        if (!legacy->is_object()) return bad("\"checksums\" is not an object");
        for (const auto& [name, digest] : legacy->items()) {
            if (!digest.is_string()) return bad("\"" + name + "\" is not a digest string");
            files.push_back({name, digest.get<std::string>(), std::nullopt});
        }
    } else {
        return bad("no \"files\" or \"checksums\"");
    }
    if (files.empty()) return bad("it lists no files");
    for (Expected& e : files) {
        if (!is_sha256(e.sha256)) return bad("\"" + e.name + "\": \"" + e.sha256 + "\" is not a SHA-256 hex digest");
        std::transform(e.sha256.begin(), e.sha256.end(), e.sha256.begin(), [](char c) { return std::tolower(c); });
        if (e.name.empty() || fs::path(e.name).is_absolute() || e.name.find("..") != std::string::npos)
            return bad("\"" + e.name + "\" is not a file name inside the model folder");
    }
    return files;
}

std::string size_text(const std::optional<std::uint64_t>& size) { return size ? std::to_string(*size) : "?"; }

bool listed_in_manifest(const std::string& name) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](char c) { return std::tolower(c); });
    const auto ends_with = [&](const std::string& suffix) {
        return lower.size() >= suffix.size() && lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return !(lower.starts_with(".") || lower.starts_with("readme") || lower.starts_with("license") ||
             lower.starts_with("licence") || ends_with(".md") || ends_with(".lock"));
}

}  // namespace

Status verify_model_files(const std::string& model_dir, const std::string& manifest_path) {
    TSR_ASSIGN_OR_RETURN(std::vector<Expected> files, read_manifest(manifest_path));
    std::string errors;
    for (const Expected& e : files) {
        const fs::path path = fs::path(model_dir) / e.name;
        std::error_code ec;
        if (!fs::is_regular_file(path, ec)) {
            errors += (errors.empty() ? "" : "; ") + e.name + ": missing (expected size=" + size_text(e.size) + ")";
            continue;
        }
        TSR_ASSIGN_OR_RETURN(FileDigest got, sha256_file(path.string()));
        if (got.sha256 != e.sha256 || (e.size && *e.size != got.size))
            errors += (errors.empty() ? "" : "; ") + e.name + ": mismatch (expected=" + e.sha256.substr(0, 16) +
                      "... size=" + size_text(e.size) + ", actual=" + got.sha256.substr(0, 16) +
                      "... size=" + std::to_string(got.size) + ")";
    }
    if (!errors.empty()) return Status(StatusCode::kDataLoss, "Integrity check failed: " + errors);
    return Status::Ok();
}

StatusOr<std::string> model_files_manifest(const std::string& model_dir) {
    std::error_code ec;
    std::vector<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(model_dir, ec))
        if (entry.is_regular_file() && listed_in_manifest(entry.path().filename().string()))
            names.push_back(entry.path().filename().string());
    if (ec) return Status::NotFound("cannot list " + model_dir + ": " + ec.message());
    if (names.empty()) return Status::NotFound(model_dir + " holds no model files");
    std::sort(names.begin(), names.end());
    Json files = Json::object();
    for (const std::string& name : names) {
        TSR_ASSIGN_OR_RETURN(FileDigest d, sha256_file((fs::path(model_dir) / name).string()));
        files[name] = {{"sha256", d.sha256}, {"size", d.size}};
    }
    return Json{{"files", files}}.dump(2) + "\n";
}

}  // namespace tessera::loader
