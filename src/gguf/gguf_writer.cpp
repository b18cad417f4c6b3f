#include "gguf/gguf_writer.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace kestrel {
namespace {

class ByteSink {
 public:
  explicit ByteSink(const std::function<void(const void*, size_t)>& out) : out_(out) {}
  template <typename T>
  void pod(T v) { out_(&v, sizeof(T)); count_ += sizeof(T); }
  void string(const std::string& s) {
    pod<uint64_t>(s.size());
    out_(s.data(), s.size());
    count_ += s.size();
  }
  void raw(const void* p, size_t n) { out_(p, n); count_ += n; }
  void pad_to(size_t alignment) {
    static const uint8_t zeros[64] = {};
    while (count_ % alignment) raw(zeros, std::min(sizeof(zeros), alignment - count_ % alignment));
  }
  size_t count() const { return count_; }

 private:
  const std::function<void(const void*, size_t)>& out_;
  size_t count_ = 0;
};

void write_value(ByteSink& s, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8: s.pod<uint8_t>(static_cast<uint8_t>(v.as_int())); break;
    case GgufValueType::INT8: s.pod<int8_t>(static_cast<int8_t>(v.as_int())); break;
    case GgufValueType::UINT16: s.pod<uint16_t>(static_cast<uint16_t>(v.as_int())); break;
    case GgufValueType::INT16: s.pod<int16_t>(static_cast<int16_t>(v.as_int())); break;
    case GgufValueType::UINT32: s.pod<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.v))); break;
    case GgufValueType::INT32: s.pod<int32_t>(static_cast<int32_t>(v.as_int())); break;
    case GgufValueType::UINT64: s.pod<uint64_t>(std::get<uint64_t>(v.v)); break;
    case GgufValueType::INT64: s.pod<int64_t>(v.as_int()); break;
    case GgufValueType::FLOAT32: s.pod<float>(static_cast<float>(v.as_double())); break;
    case GgufValueType::FLOAT64: s.pod<double>(v.as_double()); break;
    case GgufValueType::BOOL: s.pod<uint8_t>(v.as_bool() ? 1 : 0); break;
    case GgufValueType::STRING: s.string(v.as_string()); break;
    case GgufValueType::ARRAY: {
      const auto& a = v.as_array();
      s.pod<uint32_t>(static_cast<uint32_t>(a.elem_type));
      s.pod<uint64_t>(a.items.size());
      for (const auto& item : a.items) write_value(s, item);
      break;
    }
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key == "general.alignment") alignment_ = static_cast<size_t>(value.as_int());
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, FillFn fill) {
  int64_t n = 1;
  for (auto d : ne) n *= d;
  const size_t nbytes = row_bytes(type, ne.at(0)) * static_cast<size_t>(n / ne.at(0));
  for (const auto& t : tensors_)
    if (t.name == name) throw Error(fmt::format("GGUF writer: tensor '{}' added twice", name));
  tensors_.push_back({name, type, std::move(ne), nbytes, std::move(fill)});
}

void GgufWriter::add_tensor_bytes(const std::string& name, GgmlType type, std::vector<int64_t> ne, const void* data) {
  add_tensor(name, type, std::move(ne), [data](uint8_t* dst, size_t n) { std::memcpy(dst, data, n); });
}

void GgufWriter::write(const std::function<void(const void*, size_t)>& sink) const {
  ByteSink s(sink);
  s.raw("GGUF", 4);
  s.pod<uint32_t>(3);
  s.pod<uint64_t>(tensors_.size());
  s.pod<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    s.string(k);
    s.pod<uint32_t>(static_cast<uint32_t>(v.type));
    write_value(s, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    s.string(t.name);
    s.pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (auto d : t.ne) s.pod<uint64_t>(static_cast<uint64_t>(d));
    s.pod<uint32_t>(static_cast<uint32_t>(t.type));
    s.pod<uint64_t>(offset);
    offset += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  s.pad_to(alignment_);
  std::vector<uint8_t> buf;
  for (const auto& t : tensors_) {
    buf.assign(t.nbytes, 0);
    t.fill(buf.data(), buf.size());
    s.raw(buf.data(), buf.size());
    s.pad_to(alignment_);
  }
}

void GgufWriter::write_file(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) throw Error(fmt::format("{}: cannot create file: {}", path, std::strerror(errno)));
  bool ok = true;
  write([&](const void* p, size_t n) {
    if (ok && std::fwrite(p, 1, n, f.get()) != n) ok = false;
  });
  if (!ok || std::fflush(f.get()) != 0) throw Error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
}

std::vector<uint8_t> GgufWriter::write_buffer() const {
  std::vector<uint8_t> out;
  write([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

}  // namespace kestrel
