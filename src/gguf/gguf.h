#pragma once
// GGUF v2/v3 reader over a memory-mapped file. Everything read from the file
// is bounds-checked; a bad file throws kestrel::Error naming the file and the
// problem (never a crash, never an allocation larger than the file allows).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "formats/ggml_types.h"
#include "core/mapped_file.h"

namespace kestrel {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

struct GgufArray;

// One metadata value. Integers of every width are held as int64/uint64, reals
// as double; `type` remembers the on-disk type so a writer can reproduce it.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT32;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<const GgufArray>> v;

  static GgufValue u32(uint32_t x) { return {GgufValueType::UINT32, uint64_t{x}}; }
  static GgufValue i32(int32_t x) { return {GgufValueType::INT32, int64_t{x}}; }
  static GgufValue u64(uint64_t x) { return {GgufValueType::UINT64, x}; }
  static GgufValue f32(float x) { return {GgufValueType::FLOAT32, double{x}}; }
  static GgufValue boolean(bool x) { return {GgufValueType::BOOL, x}; }
  static GgufValue str(std::string s) { return {GgufValueType::STRING, std::move(s)}; }
  static GgufValue array(GgufValueType elem, std::vector<GgufValue> items);
  static GgufValue strings(const std::vector<std::string>& items);
  static GgufValue floats(const std::vector<float>& items);
  static GgufValue int32s(const std::vector<int32_t>& items);

  bool is_integer() const;
  bool is_number() const { return is_integer() || type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64; }
  int64_t as_int() const;      // throws unless an integer (or bool) that fits
  double as_double() const;    // any number
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;
  std::string to_display(size_t max_items = 8) const;
};

struct GgufArray {
  GgufValueType elem_type;
  std::vector<GgufValue> items;
};

// "64x512" for ne {64, 512}.
std::string shape_string(const std::vector<int64_t>& ne);

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;     // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;         // relative to the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t n_elements() const;
  std::string shape_string() const;  // "64x512"
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path, MappedFile::Mode mode = MappedFile::Mode::Map);
  static GgufFile parse(MappedFile file);  // takes ownership of the bytes

  const std::string& path() const { return file_.name(); }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return file_.bytes().size(); }
  size_t data_offset() const { return data_offset_; }  // where tensor data starts

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  const GgufValue& get(const std::string& key) const;  // throws naming the key
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_double(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  MappedFile file_ = MappedFile::from_buffer({}, "");
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace kestrel
