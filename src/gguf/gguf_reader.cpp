#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kestrel {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 4;
constexpr uint32_t kMaxDims = 4;

// Bounds-checked little-endian reader; every failure names the file and offset.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& name) : b_(bytes), name_(name) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("{}: invalid GGUF: {} (at byte {})", name_, what, pos_));
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }

  template <typename T>
  T read(const char* what) {
    if (remaining() < sizeof(T)) fail(fmt::format("file ends inside {}", what));
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > remaining()) fail(fmt::format("{} has length {} but only {} bytes remain", what, n, remaining()));
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& name_;
  size_t pos_ = 0;
};

size_t min_encoded_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= 12; }

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& key, int depth) {
  switch (type) {
    case GgufValueType::UINT8: return {type, uint64_t{c.read<uint8_t>("u8 value")}};
    case GgufValueType::INT8: return {type, int64_t{c.read<int8_t>("i8 value")}};
    case GgufValueType::UINT16: return {type, uint64_t{c.read<uint16_t>("u16 value")}};
    case GgufValueType::INT16: return {type, int64_t{c.read<int16_t>("i16 value")}};
    case GgufValueType::UINT32: return {type, uint64_t{c.read<uint32_t>("u32 value")}};
    case GgufValueType::INT32: return {type, int64_t{c.read<int32_t>("i32 value")}};
    case GgufValueType::UINT64: return {type, c.read<uint64_t>("u64 value")};
    case GgufValueType::INT64: return {type, c.read<int64_t>("i64 value")};
    case GgufValueType::FLOAT32: return {type, double{c.read<float>("f32 value")}};
    case GgufValueType::FLOAT64: return {type, c.read<double>("f64 value")};
    case GgufValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail(fmt::format("metadata '{}': bool value {} is neither 0 nor 1", key, b));
      return {type, b == 1};
    }
    case GgufValueType::STRING: return {type, c.read_string("string value")};
    case GgufValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) c.fail(fmt::format("metadata '{}': arrays nested deeper than {}", key, kMaxArrayDepth));
      const uint32_t et = c.read<uint32_t>("array element type");
      if (!valid_value_type(et)) c.fail(fmt::format("metadata '{}': unknown array element type {}", key, et));
      const uint64_t n = c.read<uint64_t>("array length");
      const auto elem = static_cast<GgufValueType>(et);
      // Each element takes at least min_encoded_size bytes, so a count larger
      // than that allows is a lie: refuse it before allocating anything.
      if (n > c.remaining() / min_encoded_size(elem))
        c.fail(fmt::format("metadata '{}': array of {} elements cannot fit in the {} bytes left", key, n, c.remaining()));
      std::vector<GgufValue> items;
      items.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; i++) items.push_back(read_value(c, elem, key, depth + 1));
      return GgufValue::array(elem, std::move(items));
    }
  }
  c.fail(fmt::format("metadata '{}': unknown value type {}", key, static_cast<uint32_t>(type)));
}

}  // namespace

GgufFile GgufFile::open(const std::string& path, MappedFile::Mode mode) { return parse(MappedFile::open(path, mode)); }

GgufFile GgufFile::parse(MappedFile file) {
  GgufFile g;
  g.file_ = std::move(file);
  const auto bytes = g.file_.bytes();
  const std::string& name = g.file_.name();
  Cursor c(bytes, name);

  if (bytes.size() < 4) throw Error(fmt::format("{}: not a GGUF file (only {} bytes)", name, bytes.size()));
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    throw Error(fmt::format("{}: not a GGUF file (bad magic {:02x} {:02x} {:02x} {:02x}, expected 'GGUF')", name,
                            bytes[0], bytes[1], bytes[2], bytes[3]));
  }
  g.version_ = c.read<uint32_t>("version");
  if (g.version_ == 1) c.fail("GGUF version 1 is not supported (convert the file again)");
  if (g.version_ > 0xFFFF) c.fail(fmt::format("version {:#x} looks byte-swapped: big-endian GGUF is not supported", g.version_));
  if (g.version_ != 2 && g.version_ != 3) c.fail(fmt::format("unsupported GGUF version {}", g.version_));

  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Minimum encodings: a key/value pair takes >= 8+4+1 bytes, a tensor info >= 8+4+8+4+8.
  if (n_kv > c.remaining() / 13) c.fail(fmt::format("metadata count {} cannot fit in a {}-byte file", n_kv, bytes.size()));
  if (n_tensors > c.remaining() / 32) c.fail(fmt::format("tensor count {} cannot fit in a {}-byte file", n_tensors, bytes.size()));

  g.kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; i++) {
    std::string key = c.read_string("metadata key");
    const uint32_t t = c.read<uint32_t>("metadata value type");
    if (!valid_value_type(t)) c.fail(fmt::format("metadata '{}': unknown value type {}", key, t));
    GgufValue v = read_value(c, static_cast<GgufValueType>(t), key, 0);
    if (g.kv_index_.count(key)) c.fail(fmt::format("metadata key '{}' appears twice", key));
    g.kv_index_[key] = g.kv_.size();
    g.kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = g.find("general.alignment")) {
    if (!a->is_integer()) c.fail("general.alignment is not an integer");
    const int64_t al = a->as_int();
    if (al <= 0 || (al & (al - 1)) != 0 || al > (1 << 20))
      c.fail(fmt::format("general.alignment {} is not a power of two up to 1 MiB", al));
    g.alignment_ = static_cast<size_t>(al);
  }

  g.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; i++) {
    GgufTensorInfo t;
    t.name = c.read_string("tensor name");
    const uint32_t nd = c.read<uint32_t>("tensor dimension count");
    if (nd == 0 || nd > kMaxDims) c.fail(fmt::format("tensor '{}' has {} dimensions (1 to {} allowed)", t.name, nd, kMaxDims));
    int64_t n_el = 1;
    for (uint32_t d = 0; d < nd; d++) {
      const uint64_t ne = c.read<uint64_t>("tensor dimension");
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / n_el))
        c.fail(fmt::format("tensor '{}' has an invalid dimension {} (size 0 or overflowing)", t.name, ne));
      n_el *= static_cast<int64_t>(ne);
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type_id = c.read<uint32_t>("tensor type");
    const auto tr = ggml_type_traits(type_id);
    if (!tr) c.fail(fmt::format("tensor '{}' has unknown type id {}", t.name, type_id));
    t.type = static_cast<GgmlType>(type_id);
    if (t.ne[0] % tr->block_size != 0)
      c.fail(fmt::format("tensor '{}' has rows of {} elements, not a multiple of the {} block size {}", t.name, t.ne[0],
                         tr->name, tr->block_size));
    t.nbytes = static_cast<size_t>(n_el / tr->block_size) * tr->type_size;
    t.offset = c.read<uint64_t>("tensor offset");
    if (t.offset % g.alignment_ != 0)
      c.fail(fmt::format("tensor '{}' offset {} is not aligned to {}", t.name, t.offset, g.alignment_));
    if (g.tensor_index_.count(t.name)) c.fail(fmt::format("tensor '{}' appears twice", t.name));
    g.tensor_index_[t.name] = g.tensors_.size();
    g.tensors_.push_back(std::move(t));
  }

  const size_t data_start = (c.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (data_start > bytes.size() && !g.tensors_.empty())
    c.fail("the file ends before its tensor data section");
  g.data_offset_ = data_start;
  const size_t data_size = bytes.size() > data_start ? bytes.size() - data_start : 0;
  for (auto& t : g.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw Error(fmt::format("{}: invalid GGUF: tensor '{}' ({} bytes at data offset {}) extends past the end of the file "
                              "(data section holds {} bytes; file truncated?)",
                              name, t.name, t.nbytes, t.offset, data_size));
    t.data = bytes.data() + data_start + t.offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : g.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); i++) {
    const auto* prev = by_offset[i - 1];
    if (prev->offset + prev->nbytes > by_offset[i]->offset)
      throw Error(fmt::format("{}: invalid GGUF: tensors '{}' and '{}' overlap", name, prev->name, by_offset[i]->name));
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  if (const auto* v = find(key)) return *v;
  throw Error(fmt::format("{}: missing metadata key '{}'", path(), key));
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) throw Error(fmt::format("{}: metadata '{}' should be an integer", path(), key));
  return v->as_int();
}

std::optional<double> GgufFile::get_double(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw Error(fmt::format("{}: metadata '{}' should be a number", path(), key));
  return v->as_double();
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::STRING) throw Error(fmt::format("{}: metadata '{}' should be a string", path(), key));
  return v->as_string();
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::BOOL && !v->is_integer())
    throw Error(fmt::format("{}: metadata '{}' should be a bool", path(), key));
  return v->as_bool();
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kestrel
