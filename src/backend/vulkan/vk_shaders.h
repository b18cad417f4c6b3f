#pragma once
// The compute shaders (src/backend/vulkan/shaders/*.comp), compiled to SPIR-V by glslc at build time and
// embedded in the binary (cmake/embed_spirv.cmake writes the table). A matrix product has one module per
// weight type: "matmul_Q4_K" and so on.
#include <cstddef>
#include <string_view>

namespace kestrel::vk {

struct SpirvModule {
  const char* name;
  const unsigned char* code;  // 4-byte aligned SPIR-V words
  size_t bytes;
};

// The module of that name, or null.
const SpirvModule* find_shader(std::string_view name);

}  // namespace kestrel::vk
