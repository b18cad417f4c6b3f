#include "hw/vulkan_devices.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#if KESTREL_HAVE_VULKAN
#include <vulkan/vulkan.h>
#endif

namespace kestrel {

#if KESTREL_HAVE_VULKAN
namespace {

std::string device_type(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

// What every device reports, whatever its API version.
VulkanDevice basics(const VkPhysicalDeviceProperties& p) {
  VulkanDevice d;
  d.name = p.deviceName;
  d.type = device_type(p.deviceType);
  d.api_version = fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion),
                              VK_API_VERSION_PATCH(p.apiVersion));
  return d;
}

// The rest, through the 1.1/1.2 property and feature structs (a 1.2 device).
VulkanDevice describe(VkPhysicalDevice dev, VulkanDevice d) {
  VkPhysicalDeviceSubgroupProperties subgroup{};
  subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceDriverProperties driver{};
  driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
  subgroup.pNext = &driver;
  VkPhysicalDeviceProperties2 props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props.pNext = &subgroup;
  vkGetPhysicalDeviceProperties2(dev, &props);

  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f11.pNext = &f12;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f11;
  vkGetPhysicalDeviceFeatures2(dev, &features);

  VkPhysicalDeviceMemoryProperties mem{};
  vkGetPhysicalDeviceMemoryProperties(dev, &mem);

  uint32_t n_ext = 0;
  vkEnumerateDeviceExtensionProperties(dev, nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> ext(n_ext);
  vkEnumerateDeviceExtensionProperties(dev, nullptr, &n_ext, ext.data());
  auto has_extension = [&](const char* name) {
    return std::any_of(ext.begin(), ext.end(),
                       [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
  };

  const VkPhysicalDeviceProperties& p = props.properties;
  d.driver = driver.driverName;
  for (uint32_t i = 0; i < mem.memoryHeapCount; i++)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      d.device_local_bytes = std::max<int64_t>(d.device_local_bytes, static_cast<int64_t>(mem.memoryHeaps[i].size));
  d.subgroup_size = subgroup.subgroupSize;
  d.max_shared_memory = p.limits.maxComputeSharedMemorySize;
  d.max_storage_buffer = p.limits.maxStorageBufferRange;
  d.cooperative_matrix = has_extension("VK_KHR_cooperative_matrix");
  d.cooperative_matrix_nv = has_extension("VK_NV_cooperative_matrix");
  d.integer_dot = has_extension("VK_KHR_shader_integer_dot_product");
  d.storage_16bit = f11.storageBuffer16BitAccess == VK_TRUE;
  d.storage_8bit = f12.storageBuffer8BitAccess == VK_TRUE;
  d.float16 = f12.shaderFloat16 == VK_TRUE;
  d.int8 = f12.shaderInt8 == VK_TRUE;
  return d;
}

}  // namespace

std::string vulkan_instance_failure(int vk_result) {
  return vk_result == VK_ERROR_INCOMPATIBLE_DRIVER
             ? "no Vulkan driver is installed (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER; mesa-vulkan-drivers "
               "has lavapipe, a GPU's vendor package its own)"
             : fmt::format("no Vulkan driver answered (vkCreateInstance: error {})", vk_result);
}

VulkanProbe probe_vulkan_devices() {
  VulkanProbe out;
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "kestrel";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pApplicationInfo = &app;
  VkInstance instance = VK_NULL_HANDLE;
  if (const VkResult r = vkCreateInstance(&info, nullptr, &instance); r != VK_SUCCESS) {
    out.unavailable = vulkan_instance_failure(r);
    return out;
  }
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(instance, &n, nullptr);
  std::vector<VkPhysicalDevice> devs(n);
  vkEnumeratePhysicalDevices(instance, &n, devs.data());
  for (VkPhysicalDevice dev : devs) {
    VkPhysicalDeviceProperties p{};
    vkGetPhysicalDeviceProperties(dev, &p);
    // Compute needs 1.2 here (the 1.1/1.2 feature structs); an older device is listed by name only.
    out.devices.push_back(p.apiVersion < VK_API_VERSION_1_2 ? basics(p) : describe(dev, basics(p)));
  }
  vkDestroyInstance(instance, nullptr);
  if (out.devices.empty()) out.unavailable = "the Vulkan loader found no device";
  return out;
}
#else
VulkanProbe probe_vulkan_devices() { return {{}, "built without Vulkan (libvulkan-dev was not installed)"}; }
#endif

}  // namespace kestrel
