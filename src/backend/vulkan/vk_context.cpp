// The Vulkan mechanics (vk_context.h).
#include "backend/vulkan/vk_context.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "hw/vulkan_devices.h"
#include "backend/vulkan/vk_shaders.h"

namespace kestrel::vk {
namespace {

void check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  if (r == VK_ERROR_DEVICE_LOST)
    throw Error(fmt::format("the Vulkan device was lost ({}: VK_ERROR_DEVICE_LOST); its work is gone", what));
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw Error(fmt::format("{}: out of {} memory", what, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "device" : "host"));
  throw Error(fmt::format("{}: Vulkan error {}", what, static_cast<int>(r)));
}

std::string mib(VkDeviceSize bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

Context::Context(int index) : index_(index) {
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "kestrel";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pApplicationInfo = &app;
  if (const VkResult r = vkCreateInstance(&info, nullptr, &instance_); r != VK_SUCCESS)
    throw Error("--device vulkan: " + vulkan_instance_failure(r));
  try {
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance_, &n, nullptr);
    std::vector<VkPhysicalDevice> devices(n);
    vkEnumeratePhysicalDevices(instance_, &n, devices.data());
    if (n == 0) throw Error("--device vulkan: the Vulkan loader found no device (`kestrel hw` lists them)");
    if (index < 0 || static_cast<uint32_t>(index) >= n)
      throw Error(fmt::format("--device vulkan:{}: there are {} Vulkan devices (0 to {}; `kestrel hw` lists them)",
                              index, n, n - 1));
    physical_ = devices[static_cast<size_t>(index)];
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(physical_, &props);
    name_ = props.deviceName;
    max_range_ = props.limits.maxStorageBufferRange;
    align_ = std::max<VkDeviceSize>(props.limits.minStorageBufferOffsetAlignment, 4);
    vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);

    uint32_t ext_count = 0;
    vkEnumerateDeviceExtensionProperties(physical_, nullptr, &ext_count, nullptr);
    std::vector<VkExtensionProperties> exts(ext_count);
    vkEnumerateDeviceExtensionProperties(physical_, nullptr, &ext_count, exts.data());
    const bool push = std::any_of(exts.begin(), exts.end(), [](const VkExtensionProperties& e) {
      return std::strcmp(e.extensionName, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0;
    });
    if (!push)
      throw Error(
          fmt::format("--device vulkan:{}: {} lacks VK_KHR_push_descriptor, which the backend binds its "
                      "buffers with",
                      index, name_));

    uint32_t qn = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &qn, nullptr);
    std::vector<VkQueueFamilyProperties> families(qn);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &qn, families.data());
    queue_family_ = qn;
    for (uint32_t i = 0; i < qn; i++)
      if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        queue_family_ = i;
        break;
      }
    if (queue_family_ == qn) throw Error(fmt::format("--device vulkan:{}: {} has no compute queue", index, name_));

    // Matrix units: VK_NV_cooperative_matrix with what matmul_coop.comp's SPIR-V declares (Float16,
    // VulkanMemoryModel, CooperativeMatrixNV, subgroups of 32), enabled only when every piece is there.
    const auto has = [&](const char* name) {
      return std::any_of(exts.begin(), exts.end(),
                         [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
    };
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm{};
    cm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
    VkPhysicalDeviceVulkanMemoryModelFeaturesKHR mm{};
    mm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR;
    VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16{};
    f16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR;
    const char* coop_exts[] = {VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME,
                               VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME};
    coop_ = has(coop_exts[0]) && has(coop_exts[1]) && has(coop_exts[2]);
    if (!coop_) coop_absent_ = "no VK_NV_cooperative_matrix (with the memory model and fp16 extensions)";
    if (coop_) {
      cm.pNext = &mm;
      mm.pNext = &f16;
      VkPhysicalDeviceFeatures2 features{};
      features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
      features.pNext = &cm;
      vkGetPhysicalDeviceFeatures2(physical_, &features);
      VkPhysicalDeviceSubgroupProperties subgroup{};
      subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
      VkPhysicalDeviceProperties2 props2{};
      props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
      props2.pNext = &subgroup;
      vkGetPhysicalDeviceProperties2(physical_, &props2);
      bool tile = false;
      auto list = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
          vkGetInstanceProcAddr(instance_, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
      if (list) {
        uint32_t count = 0;
        list(physical_, &count, nullptr);
        std::vector<VkCooperativeMatrixPropertiesNV> shapes(count);
        for (auto& s : shapes) s.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
        list(physical_, &count, shapes.data());
        for (const auto& s : shapes)
          tile = tile || (s.MSize == 16 && s.NSize == 16 && s.KSize == 16 && s.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                          s.BType == VK_COMPONENT_TYPE_FLOAT16_NV && s.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                          s.DType == VK_COMPONENT_TYPE_FLOAT32_NV && s.scope == VK_SCOPE_SUBGROUP_NV);
      }
      if (!cm.cooperativeMatrix || !mm.vulkanMemoryModel || !f16.shaderFloat16)
        coop_absent_ = "cooperative matrices, the memory model or fp16 arithmetic not enabled by the driver";
      else if (subgroup.subgroupSize != 32 || !(subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT))
        coop_absent_ = fmt::format("subgroups of {}, not 32", subgroup.subgroupSize);
      else if (!tile)
        coop_absent_ = "no 16x16x16 fp16 cooperative matrix with fp32 sums";
      coop_ = coop_absent_.empty();
      // Only what the shaders use.
      cm = {};
      cm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
      cm.cooperativeMatrix = VK_TRUE;
      cm.pNext = &mm;
      mm = {};
      mm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR;
      mm.vulkanMemoryModel = VK_TRUE;
      mm.pNext = &f16;
      f16 = {};
      f16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR;
      f16.shaderFloat16 = VK_TRUE;
    }

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo q{};
    q.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    q.queueFamilyIndex = queue_family_;
    q.queueCount = 1;
    q.pQueuePriorities = &priority;
    const char* enabled[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME, coop_exts[0], coop_exts[1], coop_exts[2]};
    VkDeviceCreateInfo d{};
    d.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    d.queueCreateInfoCount = 1;
    d.pQueueCreateInfos = &q;
    d.enabledExtensionCount = coop_ ? 4 : 1;
    d.ppEnabledExtensionNames = enabled;
    d.pNext = coop_ ? &cm : nullptr;
    if (coop_ && vkCreateDevice(physical_, &d, nullptr, &device_) != VK_SUCCESS) {
      coop_ = false;  // the device without matrix units rather than no device
      coop_absent_ = "vkCreateDevice refused the cooperative-matrix features";
      device_ = VK_NULL_HANDLE;
      d.enabledExtensionCount = 1;
      d.pNext = nullptr;
    }
    if (!device_) check(vkCreateDevice(physical_, &d, nullptr, &device_), "vkCreateDevice");
    vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
    push_descriptors_ =
        reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(vkGetDeviceProcAddr(device_, "vkCmdPushDescriptorSetKHR"));
    if (!push_descriptors_) throw Error("--device vulkan: vkCmdPushDescriptorSetKHR is not there");

    VkCommandPoolCreateInfo pool{};
    pool.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool.queueFamilyIndex = queue_family_;
    check(vkCreateCommandPool(device_, &pool, nullptr, &pool_), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    alloc.commandPool = pool_;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device_, &alloc, &cmd_), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fence{};
    fence.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    check(vkCreateFence(device_, &fence, nullptr, &fence_), "vkCreateFence");
  } catch (...) {
    if (device_) vkDestroyDevice(device_, nullptr);
    vkDestroyInstance(instance_, nullptr);
    throw;
  }
}

Context::~Context() {
  vkDeviceWaitIdle(device_);
  for (auto& [name, variants] : pipelines_)
    for (auto& p : variants) {
      vkDestroyPipeline(device_, p->pipeline, nullptr);
      vkDestroyPipelineLayout(device_, p->layout, nullptr);
      vkDestroyDescriptorSetLayout(device_, p->set_layout, nullptr);
      vkDestroyShaderModule(device_, p->module, nullptr);
    }
  vkDestroyFence(device_, fence_, nullptr);
  vkDestroyCommandPool(device_, pool_, nullptr);
  vkDestroyDevice(device_, nullptr);
  vkDestroyInstance(instance_, nullptr);
}

std::vector<uint32_t> Context::memory_types(uint32_t allowed, VkDeviceSize bytes,
                                            std::initializer_list<VkMemoryPropertyFlags> wants) const {
  std::vector<uint32_t> order;
  for (const VkMemoryPropertyFlags want : wants)
    for (uint32_t i = 0; i < memory_.memoryTypeCount; i++)
      if ((allowed & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & want) == want &&
          memory_.memoryHeaps[memory_.memoryTypes[i].heapIndex].size >= bytes &&
          std::find(order.begin(), order.end(), i) == order.end())
        order.push_back(i);
  return order;
}

std::unique_ptr<Buffer> Context::create(size_t bytes, Memory memory, const std::string& what, bool zero) {
  if (budget_ > 0 && allocated_ + bytes > budget_)
    throw Error(fmt::format("out of Vulkan device memory: --gpu-memory {} is used up ({} in use, {} more needed): {}",
                            mib(budget_), mib(allocated_), mib(bytes), what));
  auto b = std::make_unique<Buffer>();
  b->bytes = bytes;
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = std::max<size_t>(bytes, 16);
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device_, &info, nullptr, &b->buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b->buffer, &req);
  // The memory types to try, best first: a type whose heap is full (a discrete GPU's 256 MiB mappable window
  // without a resizable BAR) gives way to the next (host memory the device reads over the bus).
  constexpr VkMemoryPropertyFlags kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  constexpr VkMemoryPropertyFlags kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  const std::vector<uint32_t> types =
      memory == Memory::Weights
          ? memory_types(req.memoryTypeBits, req.size, {kLocal | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, kLocal, 0})
      : memory == Memory::Activations ? memory_types(req.memoryTypeBits, req.size, {kHost | kLocal, kHost})
                                      : memory_types(req.memoryTypeBits, req.size, {kHost});
  if (types.empty()) {
    vkDestroyBuffer(device_, b->buffer, nullptr);
    throw Error(
        fmt::format("Vulkan device {} has no memory type (with a heap of {}) for {}", name_, mib(req.size), what));
  }
  VkResult r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
  uint32_t type = types[0];
  for (const uint32_t t : types) {
    VkMemoryAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = t;
    r = vkAllocateMemory(device_, &alloc, nullptr, &b->memory);
    type = t;
    if (r == VK_SUCCESS || (r != VK_ERROR_OUT_OF_DEVICE_MEMORY && r != VK_ERROR_OUT_OF_HOST_MEMORY)) break;
  }
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(device_, b->buffer, nullptr);
    const uint32_t heap = memory_.memoryTypes[type].heapIndex;
    throw Error(fmt::format("out of Vulkan device memory: {} needs {} of {} (heap {} of {} has {} in all){}", what,
                            mib(req.size), name_, heap, memory_.memoryHeapCount, mib(memory_.memoryHeaps[heap].size),
                            r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                                ? ""
                                : fmt::format(" (vkAllocateMemory: error {})", static_cast<int>(r))));
  }
  check(vkBindBufferMemory(device_, b->buffer, b->memory, 0), "vkBindBufferMemory");
  if (memory_.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
    check(vkMapMemory(device_, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped), "vkMapMemory");
    if (memory != Memory::Weights && zero) std::memset(b->mapped, 0, bytes);
  }
  allocated_ += bytes;
  return b;
}

void Context::destroy(Buffer& b) {
  // A recorded command buffer that bound this buffer is invalid from now on (and a new buffer may get its handle).
  forget_recorded();
  if (b.mapped) vkUnmapMemory(device_, b.memory);
  allocated_ -= b.buffer ? b.bytes : 0;
  vkDestroyBuffer(device_, b.buffer, nullptr);
  vkFreeMemory(device_, b.memory, nullptr);
  b = Buffer{};
}

void Context::upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) {
  if (dst.mapped) {
    std::memcpy(static_cast<char*>(dst.mapped) + offset, src, bytes);
    return;
  }
  // Not host-visible (a discrete GPU's VRAM without a mappable window): through a staging buffer, in pieces.
  flush();
  constexpr size_t kPiece = size_t{64} << 20;
  auto staging = create(std::min(bytes, kPiece), Memory::Staging, "a weight upload's staging buffer");
  for (size_t done = 0; done < bytes; done += kPiece) {
    const size_t n = std::min(kPiece, bytes - done);
    std::memcpy(staging->mapped, static_cast<const char*>(src) + done, n);
    check(vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
    begin(cmd_);
    VkBufferCopy region{0, offset + done, n};
    vkCmdCopyBuffer(cmd_, staging->buffer, dst.buffer, 1, &region);
    check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    submit(cmd_);
  }
  destroy(*staging);
}

Binding Context::bind(const Buffer& b, size_t byte_offset, size_t bytes) const {
  Binding r;
  r.buffer = b.buffer;
  r.offset = byte_offset / align_ * align_;
  r.range = std::min<VkDeviceSize>(max_range_, std::max<size_t>(b.bytes, 16) - r.offset);
  r.range = r.range / 4 * 4;
  if (byte_offset + bytes > r.offset + r.range)
    throw Error(
        fmt::format("a Vulkan binding of {} at byte {} of a {} buffer is beyond what one binding may span on {} "
                    "(maxStorageBufferRange {})",
                    mib(bytes), byte_offset, mib(b.bytes), name_, mib(max_range_)));
  r.word = static_cast<uint32_t>((byte_offset - r.offset) / 4);
  return r;
}

Context::Pipeline& Context::pipeline(std::string_view name, uint32_t bindings, uint32_t spec) {
  auto it = pipelines_.find(name);
  if (it != pipelines_.end())
    for (auto& v : it->second)
      if (v->spec == spec) {
        if (v->bindings != bindings)
          throw Error(
              fmt::format("Vulkan shader {}: {} bindings given, its pipeline has {}", name, bindings, v->bindings));
        return *v;
      }
  const SpirvModule* code = find_shader(name);
  if (!code) throw Error(fmt::format("no Vulkan shader named {} is built in", name));
  Pipeline p;
  p.bindings = bindings;
  p.spec = spec;
  VkShaderModuleCreateInfo m{};
  m.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  m.codeSize = code->bytes;
  m.pCode = reinterpret_cast<const uint32_t*>(code->code);
  check(vkCreateShaderModule(device_, &m, nullptr, &p.module), "vkCreateShaderModule");
  std::vector<VkDescriptorSetLayoutBinding> b(bindings);
  for (uint32_t i = 0; i < bindings; i++) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo set{};
  set.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  set.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  set.bindingCount = bindings;
  set.pBindings = b.data();
  check(vkCreateDescriptorSetLayout(device_, &set, nullptr, &p.set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
  VkPipelineLayoutCreateInfo layout{};
  layout.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  layout.setLayoutCount = 1;
  layout.pSetLayouts = &p.set_layout;
  layout.pushConstantRangeCount = 1;
  layout.pPushConstantRanges = &push;
  check(vkCreatePipelineLayout(device_, &layout, nullptr, &p.layout), "vkCreatePipelineLayout");
  VkComputePipelineCreateInfo c{};
  c.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  c.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  c.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  c.stage.module = p.module;
  c.stage.pName = "main";
  c.layout = p.layout;
  const VkSpecializationMapEntry entry{0, 0, sizeof(uint32_t)};
  const VkSpecializationInfo specialise{1, &entry, sizeof(uint32_t), &p.spec};
  if (spec > 0) c.stage.pSpecializationInfo = &specialise;
  check(vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &c, nullptr, &p.pipeline), "vkCreateComputePipelines");
  if (it == pipelines_.end())
    it = pipelines_.emplace(std::string(name), std::vector<std::unique_ptr<Pipeline> >()).first;
  it->second.push_back(std::make_unique<Pipeline>(p));
  return *it->second.back();
}

void Context::begin(VkCommandBuffer cmd) const {
  VkCommandBufferBeginInfo b{};
  b.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  check(vkBeginCommandBuffer(cmd, &b), "vkBeginCommandBuffer");
}

void Context::dispatch(std::string_view name, const Binding* bindings, size_t n_bindings, const void* push,
                       uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t spec) {
  Pipeline& p = pipeline(name, static_cast<uint32_t>(n_bindings), spec);
  if (n_bindings > Dispatch::kMaxBindings || push_bytes > sizeof(Dispatch::push))
    throw Error(fmt::format("Vulkan shader {}: {} bindings, {} bytes of push constants", name, n_bindings, push_bytes));
  Dispatch d;
  d.pipeline = &p;
  d.n_bindings = static_cast<uint32_t>(n_bindings);
  std::copy(bindings, bindings + n_bindings, d.bindings.begin());
  std::memcpy(d.push.data(), push, push_bytes);
  d.push_bytes = push_bytes;
  d.groups = {gx, gy, gz};
  pending_.push_back(d);
  // The list's key: every field that goes into the command buffer, so equal keys record equal buffers.
  key_.push_back(reinterpret_cast<uintptr_t>(&p));
  key_.push_back(uint64_t{d.n_bindings} | uint64_t{push_bytes} << 8 | uint64_t{gx} << 16);
  key_.push_back(uint64_t{gy} | uint64_t{gz} << 32);
  for (size_t i = 0; i < n_bindings; i++) {
    const Binding& b = bindings[i];
    key_.push_back(reinterpret_cast<uint64_t>(b.buffer));
    key_.push_back(b.offset);
    key_.push_back(b.range);
  }
  for (uint32_t i = 0; i < push_bytes; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, d.push.data() + i, std::min<uint32_t>(8, push_bytes - i));
    key_.push_back(w);
  }
}

void Context::encode(VkCommandBuffer cmd) const {
  begin(cmd);
  VkMemoryBarrier barrier{};
  barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  for (const Dispatch& d : pending_) {
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline->pipeline);
    VkDescriptorBufferInfo infos[Dispatch::kMaxBindings];
    VkWriteDescriptorSet writes[Dispatch::kMaxBindings] = {};
    for (uint32_t i = 0; i < d.n_bindings; i++) {
      infos[i] = {d.bindings[i].buffer, d.bindings[i].offset, d.bindings[i].range};
      writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
      writes[i].dstBinding = i;
      writes[i].descriptorCount = 1;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &infos[i];
    }
    push_descriptors_(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline->layout, 0, d.n_bindings, writes);
    vkCmdPushConstants(cmd, d.pipeline->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, d.push_bytes, d.push.data());
    vkCmdDispatch(cmd, d.groups[0], d.groups[1], d.groups[2]);
    // The next dispatch sees this one's writes (and waits for its reads before overwriting).
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                         &barrier, 0, nullptr, 0, nullptr);
  }
  // The host reads what the shaders wrote once the fence is signalled.
  VkMemoryBarrier host{};
  host.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &host, 0, nullptr,
                       0, nullptr);
  check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
}

void Context::submit(VkCommandBuffer cmd) {
  VkSubmitInfo s{};
  s.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  s.commandBufferCount = 1;
  s.pCommandBuffers = &cmd;
  check(vkQueueSubmit(queue_, 1, &s, fence_), "vkQueueSubmit");
  submissions_++;
  check(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(vkResetFences(device_, 1, &fence_), "vkResetFences");
}

void Context::flush() {
  if (pending_.empty()) return;

  // A list recorded before (a decode step of a shape seen before: the same dispatches over the same buffers,
  // the per-step data in the same staging places) is submitted again as it was recorded.
  const uint64_t hash = XXH3_64bits(key_.data(), key_.size() * sizeof(uint64_t));
  Recorded* slot = nullptr;
  for (Recorded& r : recorded_)
    if (r.hash == hash && r.key == key_) slot = &r;
  if (slot) {
    reused_++;
  } else {
    // The least recently used of the kept buffers (or a new one while there are fewer than kKeep).
    if (recorded_.size() < kKeep) {
      Recorded r;
      VkCommandBufferAllocateInfo alloc{};
      alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
      alloc.commandPool = pool_;
      alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      alloc.commandBufferCount = 1;
      check(vkAllocateCommandBuffers(device_, &alloc, &r.cmd), "vkAllocateCommandBuffers");
      recorded_.push_back(std::move(r));
      slot = &recorded_.back();
    } else {
      slot = &*std::min_element(recorded_.begin(), recorded_.end(),
                                [](const Recorded& a, const Recorded& b) { return a.used < b.used; });
      check(vkResetCommandBuffer(slot->cmd, 0), "vkResetCommandBuffer");
    }
    slot->hash = 0;  // not valid until encoded
    encode(slot->cmd);
    slot->hash = hash;
    slot->key = key_;
  }
  slot->used = ++uses_;
  pending_.clear();
  key_.clear();
  submit(slot->cmd);
}

void Context::forget_recorded() {
  for (Recorded& r : recorded_) r.hash = 0, r.key.clear();
}

}  // namespace kestrel::vk
