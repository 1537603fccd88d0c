#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tessera::loader {

using json = nlohmann::json;

std::int64_t TensorView::numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

namespace {
std::string safetensors_dtype_name(DType t) {
    switch (t) {
        case DType::kF32: return "F32";
        case DType::kBF16: return "BF16";
        case DType::kF16: return "F16";
        case DType::kF8E4M3: return "F8_E4M3";
        case DType::kF8E5M2: return "F8_E5M2";
    }
    return "?";
}

std::optional<DType> parse_safetensors_dtype(const std::string& s) {
    if (s == "F32") return DType::kF32;
    if (s == "BF16") return DType::kBF16;
    if (s == "F16") return DType::kF16;
    if (s == "F8_E4M3") return DType::kF8E4M3;
    if (s == "F8_E5M2") return DType::kF8E5M2;
    return std::nullopt;
}
}  // namespace

SafetensorsFile::~SafetensorsFile() {
    if (map_ != nullptr) munmap(map_, map_size_);
}

void SafetensorsFile::drop_resident_pages() const {
    // A private read-only file mapping: MADV_DONTNEED only drops our page-table entries.
    if (map_ != nullptr) madvise(map_, map_size_, MADV_DONTNEED);
}

void SafetensorsFile::drop_resident_pages(const void* data, std::size_t bytes) {
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) / page * page;
    const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        ::close(fd);
        return Status::Internal(path + ": cannot stat: " + std::strerror(errno));
    }
    const auto file_size = static_cast<std::size_t>(st.st_size);
    if (file_size < 8) {
        ::close(fd);
        return Status::DataLoss(path + ": truncated file (" + std::to_string(file_size) +
                                " bytes; a safetensors file starts with an 8-byte header length)");
    }
    void* map = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) return Status::Internal(path + ": mmap failed: " + std::strerror(errno));
    std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
    file->path_ = path;
    file->map_ = map;
    file->map_size_ = file_size;
    madvise(map, file_size, MADV_WILLNEED);

    const auto* base = static_cast<const std::byte*>(map);
    std::uint64_t header_len = 0;
    std::memcpy(&header_len, base, 8);
    if (header_len > file_size - 8) {
        return Status::DataLoss(path + ": truncated file: header of " + std::to_string(header_len) +
                                " bytes does not fit in " + std::to_string(file_size) + " bytes");
    }
    json header;
    try {
        header = json::parse(reinterpret_cast<const char*>(base + 8),
                             reinterpret_cast<const char*>(base + 8 + header_len));
    } catch (const json::exception& e) {
        return Status::DataLoss(path + ": the header is not valid JSON: " + e.what());
    }
    if (!header.is_object()) return Status::DataLoss(path + ": the header is not a JSON object");
    const std::byte* data_start = base + 8 + header_len;
    const std::size_t data_size = file_size - 8 - header_len;
    for (auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        const std::string where = path + ": tensor '" + name + "'";
        if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
            !entry.contains("data_offsets")) {
            return Status::DataLoss(where + ": header entry lacks dtype, shape or data_offsets");
        }
        TensorView view;
        view.name = name;
        view.file = path;
        const std::string dtype = entry["dtype"].is_string() ? entry["dtype"].get<std::string>() : "";
        auto parsed = parse_safetensors_dtype(dtype);
        if (!parsed) {
            return Status::Unimplemented(where + " has dtype " + dtype +
                                         "; supported dtypes: F32, BF16, F16, F8_E4M3, F8_E5M2");
        }
        view.dtype = *parsed;
        try {
            view.shape = entry["shape"].get<std::vector<std::int64_t>>();
            auto offsets = entry["data_offsets"].get<std::vector<std::uint64_t>>();
            if (offsets.size() != 2 || offsets[0] > offsets[1])
                return Status::DataLoss(where + ": bad data_offsets");
            if (offsets[1] > data_size) {
                return Status::DataLoss(where + ": truncated file: data ends at byte " +
                                        std::to_string(offsets[1]) + " of the data section, which has " +
                                        std::to_string(data_size) + " bytes");
            }
            view.data = data_start + offsets[0];
            view.bytes = offsets[1] - offsets[0];
        } catch (const json::exception& e) {
            return Status::DataLoss(where + ": bad shape or data_offsets: " + e.what());
        }
        const auto expected = static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype);
        if (expected != view.bytes) {
            return Status::DataLoss(where + ": shape " + shape_string(view.shape) + " of " + dtype +
                                    " needs " + std::to_string(expected) + " bytes, the file holds " +
                                    std::to_string(view.bytes));
        }
        file->tensors_.emplace(name, std::move(view));
    }
    return file;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    for (const auto& t : tensors) {
        header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = header.dump();
    while (text.size() % 8 != 0) text.push_back(' ');  // keeps the data 8-byte aligned
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return Status::Internal(path + ": cannot open for writing");
    const std::uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors)
        out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    out.close();
    if (!out) return Status::Internal(path + ": write failed (disk full?)");
    return Status::Ok();
}

}  // namespace tessera::loader
