#pragma once
// loader/safetensors.h — read-only, memory-mapped access to Hugging Face
// `.safetensors` files, and a writer for the test models make-model produces.
// A SafetensorsFile is immutable after open() and may be read from any thread; the tensor
// bytes stay valid while the file object lives.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace tessera::loader {

struct TensorView {
    std::string name;
    std::string file;  // the file it came from, for error messages
    DType dtype = DType::kF32;
    std::vector<std::int64_t> shape;
    const std::byte* data = nullptr;
    std::size_t bytes = 0;

    std::int64_t numel() const;
};

std::string shape_string(const std::vector<std::int64_t>& shape);

class SafetensorsFile {
 public:
    // Maps `path` and validates its header: known dtypes, offsets inside the file, sizes
    // matching shapes. Errors name the file and, where there is one, the tensor.
    static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }
    const TensorView* find(const std::string& name) const;
    // Unmaps the file pages this process has touched so far (they stay in the page cache).
    // The loader calls it as it goes, so that start-up peaks near the packed weights rather
    // than packed weights + the whole file. Tensor views stay valid: reading one again
    // faults its pages back in.
    void drop_resident_pages() const;
    // The same for the whole pages inside [data, data + bytes) of any file's mapping.
    static void drop_resident_pages(const void* data, std::size_t bytes);

 private:
    SafetensorsFile() = default;

    std::string path_;
    void* map_ = nullptr;
    std::size_t map_size_ = 0;
    std::map<std::string, TensorView> tensors_;
};

// Tensors to write: name → (dtype, shape, raw little-endian bytes).
struct TensorToWrite {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;
};

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace tessera::loader
