#pragma once
// GGUF v3 writer: metadata in insertion order, tensor infos, then aligned
// tensor data. Tensor bytes are produced one tensor at a time by a callback,
// so multi-gigabyte files are written without holding them in memory.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace kestrel {

class GgufWriter {
 public:
  using FillFn = std::function<void(uint8_t* dst, size_t nbytes)>;

  void set(const std::string& key, GgufValue value);  // replaces an existing key in place
  void set_u32(const std::string& key, uint32_t v) { set(key, GgufValue::u32(v)); }
  void set_f32(const std::string& key, float v) { set(key, GgufValue::f32(v)); }
  void set_str(const std::string& key, std::string v) { set(key, GgufValue::str(std::move(v))); }
  void set_bool(const std::string& key, bool v) { set(key, GgufValue::boolean(v)); }

  // ne[0] is the row length; fill receives exactly the tensor's byte size.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, FillFn fill);
  void add_tensor_bytes(const std::string& name, GgmlType type, std::vector<int64_t> ne, const void* data);

  void write_file(const std::string& path) const;
  std::vector<uint8_t> write_buffer() const;

  size_t alignment() const { return alignment_; }

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    size_t nbytes;
    FillFn fill;
  };
  void write(const std::function<void(const void*, size_t)>& sink) const;

  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
  size_t alignment_ = 32;
};

}  // namespace kestrel
