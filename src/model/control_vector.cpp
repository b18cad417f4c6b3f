#include "model/control_vector.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/splitmix.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace kestrel {

ControlVector load_control_vectors(const std::vector<ControlVectorFile>& files, int64_t n_embd, int n_layer, int start,
                                   int end) {
  if (start <= 0) start = 1;
  if (end <= 0) end = n_layer;
  if (start > end || start >= n_layer)  // (an end past the last layer is the last, as in llama.cpp)
    throw Error(fmt::format("--control-vector-layer-range {} {}: no layer of the model's 1 to {} is in it (layer 0 is "
                            "never changed)",
                            start, end, n_layer - 1));
  ControlVector cv;
  cv.n_embd = n_embd;
  cv.n_layer = n_layer;
  cv.rows.assign(static_cast<size_t>(n_layer * n_embd), 0.0f);
  cv.given.assign(static_cast<size_t>(n_layer), 0);
  for (const ControlVectorFile& f : files) {
    const GgufFile g = GgufFile::open(f.path);
    const auto err = [&](const std::string& what) { return Error(fmt::format("control vector {}: {}", f.path, what)); };
    for (const auto& [key, value] : g.metadata())
      if (key.rfind("general.", 0) != 0 && key.rfind("controlvector.", 0) != 0)
        throw err(fmt::format("metadata key '{}' is not one a control vector has", key));
    if (g.tensors().empty()) throw err("it has no direction tensors");
    for (const GgufTensorInfo& t : g.tensors()) {
      char* stop = nullptr;
      const long layer = t.name.rfind("direction.", 0) == 0 ? std::strtol(t.name.c_str() + 10, &stop, 10) : -1;
      if (layer < 0 || !stop || *stop != '\0' || stop == t.name.c_str() + 10)
        throw err(fmt::format("tensor '{}' is not a direction.L", t.name));
      if (layer == 0) throw err(fmt::format("tensor '{}': layer 0 takes no direction (llama.cpp refuses it)", t.name));
      if (layer >= n_layer)
        throw err(fmt::format("tensor '{}': the model has layers 0 to {}", t.name, n_layer - 1));
      if (t.type != GgmlType::F32) throw err(fmt::format("tensor '{}' is {}, not F32", t.name, type_name(t.type)));
      if (t.n_elements() != n_embd || t.ne[0] != n_embd)
        throw err(fmt::format("tensor '{}' is {} but the model's width is {}", t.name, t.shape_string(), n_embd));
      float* dst = cv.rows.data() + layer * n_embd;
      const auto* src = reinterpret_cast<const float*>(t.data);
      for (int64_t j = 0; j < n_embd; j++) {
        float v;
        std::memcpy(&v, src + j, sizeof v);
        dst[j] += v * f.scale;  // (as common_control_vector_load_one: the product rounded, then the sum)
      }
      if (layer >= start && layer <= end) cv.given[static_cast<size_t>(layer)] = 1;
    }
  }
  return cv;
}

void write_synth_control_vector(const std::string& path, const std::string& arch, int64_t n_embd, int n_layer,
                                uint64_t seed, float stddev) {
  GgufWriter w;
  w.set_str("general.architecture", "controlvector");
  w.set_str("controlvector.model_hint", arch);
  w.set(std::string("controlvector.layer_count"), GgufValue::i32(n_layer - 1));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 23;
  const double half = stddev * std::sqrt(3.0);
  for (int l = 1; l < n_layer; l++) {
    std::vector<float> v(static_cast<size_t>(n_embd));
    for (float& x : v) x = static_cast<float>((2.0 * splitmix_unit(state) - 1.0) * half);
    w.add_tensor(fmt::format("direction.{}", l), GgmlType::F32, {n_embd},
                 [v](uint8_t* dst, size_t bytes) { std::memcpy(dst, v.data(), bytes); });
  }
  w.write_file(path);
}

}  // namespace kestrel
