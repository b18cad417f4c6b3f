#pragma once
// The Vulkan compute devices the loader reports (`kestrel hw`): what a GPU backend on Vulkan would run on
// and which of its features it could use. Empty with a reason when the build has no Vulkan, the machine no
// loader or driver.
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

struct VulkanDevice {
  std::string name;                // "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string type;                // discrete, integrated, virtual, cpu, other
  std::string api_version;         // "1.3.230"
  std::string driver;              // "llvmpipe", "NVIDIA"...
  int64_t device_local_bytes = 0;  // the largest device-local memory heap
  uint32_t subgroup_size = 0;
  uint32_t max_shared_memory = 0;                    // maxComputeSharedMemorySize
  uint64_t max_storage_buffer = 0;                   // maxStorageBufferRange: the most one binding may span
  bool cooperative_matrix = false;                   // VK_KHR_cooperative_matrix (the matrix units)
  bool cooperative_matrix_nv = false;                // VK_NV_cooperative_matrix (what the backend's prefill uses)
  bool storage_16bit = false, storage_8bit = false;  // 16-/8-bit values in storage buffers
  bool float16 = false, int8 = false;                // 16-bit float / 8-bit integer arithmetic in shaders
  bool integer_dot = false;                          // VK_KHR_shader_integer_dot_product
};

struct VulkanProbe {
  std::vector<VulkanDevice> devices;
  std::string unavailable;  // why there are none ("" when the loader answered)
};

// Asks the Vulkan loader once per call (instance created and destroyed).
VulkanProbe probe_vulkan_devices();

// Why vkCreateInstance failed with this VkResult ("no Vulkan driver is installed ..."), for the probe and the
// Vulkan backend alike (a build with Vulkan only).
std::string vulkan_instance_failure(int vk_result);

}  // namespace kestrel
