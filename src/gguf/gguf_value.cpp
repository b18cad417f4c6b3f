#include <fmt/format.h>

#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kestrel {

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "u8";
    case GgufValueType::INT8: return "i8";
    case GgufValueType::UINT16: return "u16";
    case GgufValueType::INT16: return "i16";
    case GgufValueType::UINT32: return "u32";
    case GgufValueType::INT32: return "i32";
    case GgufValueType::FLOAT32: return "f32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "str";
    case GgufValueType::ARRAY: return "arr";
    case GgufValueType::UINT64: return "u64";
    case GgufValueType::INT64: return "i64";
    case GgufValueType::FLOAT64: return "f64";
  }
  return "?";
}

GgufValue GgufValue::array(GgufValueType elem, std::vector<GgufValue> items) {
  auto arr = std::make_shared<GgufArray>(GgufArray{elem, std::move(items)});
  return {GgufValueType::ARRAY, std::shared_ptr<const GgufArray>(std::move(arr))};
}

GgufValue GgufValue::strings(const std::vector<std::string>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(str(s));
  return array(GgufValueType::STRING, std::move(v));
}

GgufValue GgufValue::floats(const std::vector<float>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (float f : items) v.push_back(f32(f));
  return array(GgufValueType::FLOAT32, std::move(v));
}

GgufValue GgufValue::int32s(const std::vector<int32_t>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(i32(x));
  return array(GgufValueType::INT32, std::move(v));
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::UINT16:
    case GgufValueType::INT16: case GgufValueType::UINT32: case GgufValueType::INT32:
    case GgufValueType::UINT64: case GgufValueType::INT64: return true;
    default: return false;
  }
}

int64_t GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(fmt::format("integer value {} is too large", *u));
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  throw Error(fmt::format("expected an integer, found a value of type {}", gguf_value_type_name(type)));
}

double GgufValue::as_double() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  throw Error(fmt::format("expected a number, found a value of type {}", gguf_value_type_name(type)));
}

bool GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return as_int() != 0;
}

const std::string& GgufValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  throw Error(fmt::format("expected a string, found a value of type {}", gguf_value_type_name(type)));
}

const GgufArray& GgufValue::as_array() const {
  if (const auto* a = std::get_if<std::shared_ptr<const GgufArray>>(&v)) return **a;
  throw Error(fmt::format("expected an array, found a value of type {}", gguf_value_type_name(type)));
}

std::string GgufValue::to_display(size_t max_items) const {
  switch (type) {
    case GgufValueType::STRING: {
      const auto& s = as_string();
      std::string out;
      for (char c : s.substr(0, 120)) out += (c == '\n') ? std::string("\\n") : std::string(1, c);
      return "\"" + out + (s.size() > 120 ? "...\"" : "\"");
    }
    case GgufValueType::ARRAY: {
      const auto& a = as_array();
      std::string out = fmt::format("[{} x {}] [", a.items.size(), gguf_value_type_name(a.elem_type));
      for (size_t i = 0; i < a.items.size() && i < max_items; i++)
        out += (i ? ", " : "") + a.items[i].to_display(max_items);
      return out + (a.items.size() > max_items ? ", ...]" : "]");
    }
    case GgufValueType::BOOL: return as_bool() ? "true" : "false";
    case GgufValueType::FLOAT32: case GgufValueType::FLOAT64: return fmt::format("{}", as_double());
    default: {
      if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
      return std::to_string(std::get<int64_t>(v));
    }
  }
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s;
  for (size_t i = 0; i < ne.size(); i++) {
    if (i) s += 'x';
    s += std::to_string(ne[i]);
  }
  return s;
}

std::string GgufTensorInfo::shape_string() const { return kestrel::shape_string(ne); }

}  // namespace kestrel
