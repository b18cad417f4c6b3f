#include "formats/ggml_types.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"

namespace kestrel {
namespace {

struct Entry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Block sizes and byte sizes from the GGUF specification (ggml.c type_traits).
constexpr std::array kTypes = {
    Entry{0, {"F32", 1, 4, true}},       Entry{1, {"F16", 1, 2, true}},
    Entry{2, {"Q4_0", 32, 18, true}},    Entry{3, {"Q4_1", 32, 20, true}},
    Entry{6, {"Q5_0", 32, 22, true}},   Entry{7, {"Q5_1", 32, 24, true}},
    Entry{8, {"Q8_0", 32, 34, true}},    Entry{9, {"Q8_1", 32, 36, false}},
    Entry{10, {"Q2_K", 256, 84, true}}, Entry{11, {"Q3_K", 256, 110, true}},
    Entry{12, {"Q4_K", 256, 144, true}}, Entry{13, {"Q5_K", 256, 176, true}},
    Entry{14, {"Q6_K", 256, 210, true}}, Entry{15, {"Q8_K", 256, 292, false}},
    Entry{16, {"IQ2_XXS", 256, 66, true}}, Entry{17, {"IQ2_XS", 256, 74, true}},
    Entry{18, {"IQ3_XXS", 256, 98, true}}, Entry{19, {"IQ1_S", 256, 50, true}},
    Entry{20, {"IQ4_NL", 32, 18, true}},   Entry{21, {"IQ3_S", 256, 110, true}},
    Entry{22, {"IQ2_S", 256, 82, true}},   Entry{23, {"IQ4_XS", 256, 136, true}},
    Entry{24, {"I8", 1, 1, false}},      Entry{25, {"I16", 1, 2, false}},
    Entry{26, {"I32", 1, 4, false}},     Entry{27, {"I64", 1, 8, false}},
    Entry{28, {"F64", 1, 8, false}},     Entry{29, {"IQ1_M", 256, 56, true}},
    Entry{30, {"BF16", 1, 2, true}},     Entry{34, {"TQ1_0", 256, 54, false}},
    Entry{35, {"TQ2_0", 256, 66, false}},    Entry{39, {"MXFP4", 32, 17, true}},
    Entry{1000, {"KESTREL_FP8_E4M3", 32, 34, true}},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  for (const auto& e : kTypes)
    if (e.id == type_id) return e.traits;
  return std::nullopt;
}

const GgmlTypeTraits& traits(GgmlType t) {
  for (const auto& e : kTypes)
    if (e.id == static_cast<uint32_t>(t)) return e.traits;
  throw Error("unknown tensor type id " + std::to_string(static_cast<uint32_t>(t)));
}

std::string_view type_name(GgmlType t) { return traits(t).name; }

std::optional<GgmlType> type_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  if (upper == "FP8" || upper == "FP8_E4M3") return GgmlType::KESTREL_FP8_E4M3;
  for (const auto& e : kTypes)
    if (upper == e.traits.name) return static_cast<GgmlType>(e.id);
  return std::nullopt;
}

uint32_t llama_file_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 12;  // Q3_K_M
    case GgmlType::Q4_K: return 15;  // Q4_K_M
    case GgmlType::Q5_K: return 17;  // Q5_K_M
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ2_XXS: return 19;
    case GgmlType::IQ2_XS: return 20;
    case GgmlType::IQ3_XXS: return 23;
    case GgmlType::IQ1_S: return 24;
    case GgmlType::IQ3_S: return 26;
    case GgmlType::IQ2_S: return 28;
    case GgmlType::IQ1_M: return 31;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::BF16: return 32;
    case GgmlType::MXFP4: return 38;
    default: return 0;
  }
}

size_t row_bytes(GgmlType t, int64_t n) {
  const auto& tr = traits(t);
  if (n % tr.block_size != 0)
    throw Error(std::string("row of ") + std::to_string(n) + " elements is not a multiple of the " +
                tr.name + " block size " + std::to_string(tr.block_size));
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

}  // namespace kestrel
