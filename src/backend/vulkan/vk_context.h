#pragma once
// The Vulkan mechanics under the GPU backend (vulkan_backend.cpp): one device and its compute queue, buffers
// in the memory each use wants, the embedded shaders' pipelines, and a command buffer that collects dispatches
// until flush() submits them and waits. Only this file pair and the backend see vulkan.h.
#include <vulkan/vulkan.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::vk {

enum class Memory {
  Activations,  // host-visible and coherent (device-local too where the device has such memory): mapped
  Weights,      // device-local (host-visible where that is offered too: written in place)
  Staging,      // host-visible, coherent: inputs copied in, outputs copied out
};

struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;  // null: not host-visible
  size_t bytes = 0;
};

// What one shader binding sees: a buffer window (offset aligned as the device asks, at most its largest
// binding) and the element offset of the data inside it, in 4-byte words.
struct Binding {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0, range = 0;
  uint32_t word = 0;
};

class Context {
 public:
  // Device `index` of the loader's list; throws Error naming why there is none.
  explicit Context(int index);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const std::string& name() const { return name_; }
  int index() const { return index_; }
  VkDeviceSize max_binding() const { return max_range_; }
  // Holds bindings to at most this many bytes (below the device's own limit; tests).
  void limit_binding(VkDeviceSize bytes) {
    max_range_ = std::min(max_range_, std::max<VkDeviceSize>(bytes / align_ * align_, align_));
  }
  VkDeviceSize offset_alignment() const { return align_; }
  // VK_NV_cooperative_matrix is there and enabled, with 16x16x16 fp16 x fp16 + fp32 subgroup tiles, 32-wide
  // subgroups, fp16 arithmetic and the Vulkan memory model (what matmul_coop.comp needs); else why not.
  bool coop() const { return coop_; }
  const std::string& coop_absent() const { return coop_absent_; }
  // At most this many bytes of buffers at once (--gpu-memory; 0: what the device has): create() past it is an
  // Error naming what did not fit and what is in use.
  void limit_memory(size_t bytes) { budget_ = bytes; }
  size_t budget() const { return budget_; }
  size_t allocated() const { return allocated_; }  // the buffers' bytes now

  // A buffer of `bytes` in that kind of memory (zeroed when mapped); Error naming `what` and the free memory
  // when the device has no room.
  std::unique_ptr<Buffer> create(size_t bytes, Memory memory, const std::string& what, bool zero = true);
  void destroy(Buffer& b);
  // dst[offset, offset + bytes) = src, now (through a staging copy when dst is not host-visible).
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes);
  // The window of b that holds bytes [byte_offset, byte_offset + bytes): Error when one binding cannot span it.
  Binding bind(const Buffer& b, size_t byte_offset, size_t bytes) const;

  // Adds shader `name` (vk_shaders.h) over these bindings and push constants to the list the next flush
  // submits, each dispatch followed by a barrier so the next one sees its writes.
  // spec > 0: the pipeline with the shader's specialisation constant 0 set to it (a shape class: the
  // decode product's invocations per row), one pipeline each.
  void dispatch(std::string_view name, std::initializer_list<Binding> bindings, const void* push, uint32_t push_bytes,
                uint32_t gx, uint32_t gy = 1, uint32_t gz = 1, uint32_t spec = 0) {
    dispatch(name, bindings.begin(), bindings.size(), push, push_bytes, gx, gy, gz, spec);
  }
  void dispatch(std::string_view name, const Binding* bindings, size_t n_bindings, const void* push,
                uint32_t push_bytes, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1, uint32_t spec = 0);
  // Creates shader `name`'s pipeline (for `bindings` bindings) now rather than at its first dispatch: the
  // backend makes those a model will use at load, so no step waits for a shader compiler.
  void prepare(std::string_view name, uint32_t bindings, uint32_t spec = 0) { pipeline(name, bindings, spec); }
  bool pending() const { return !pending_.empty(); }
  // Drops the list without submitting it (a step that failed midway).
  void discard() {
    pending_.clear();
    key_.clear();
  }
  // Submits the list and waits for it (a lost device is an Error). A list equal to one recorded before (the
  // same dispatches, bindings and push constants: a step of a shape seen before, its per-step data written
  // to the same places) reuses that command buffer instead of recording a new one; the last kKeep are kept.
  void flush();
  uint64_t submissions() const { return submissions_; }
  uint64_t reused() const { return reused_; }  // submissions of a command buffer recorded before

 private:
  struct Pipeline {
    VkShaderModule module = VK_NULL_HANDLE;
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
    uint32_t bindings = 0;
    uint32_t spec = 0;  // specialisation constant 0 (0: the shader's default)
  };
  struct Dispatch {
    static constexpr size_t kMaxBindings = 6;
    const Pipeline* pipeline = nullptr;
    std::array<Binding, kMaxBindings> bindings{};
    uint32_t n_bindings = 0;
    std::array<uint8_t, 128> push{};
    uint32_t push_bytes = 0;
    std::array<uint32_t, 3> groups{};
  };
  struct Recorded {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    uint64_t hash = 0, used = 0;
    std::vector<uint64_t> key;
  };
  static constexpr size_t kKeep = 8;
  Pipeline& pipeline(std::string_view name, uint32_t bindings, uint32_t spec);
  // The memory types allowed that have each wanted set of properties, in the order of `wants` (each once),
  // on heaps of at least `bytes`.
  std::vector<uint32_t> memory_types(uint32_t allowed, VkDeviceSize bytes,
                                     std::initializer_list<VkMemoryPropertyFlags> wants) const;
  void begin(VkCommandBuffer cmd) const;
  void encode(VkCommandBuffer cmd) const;  // the pending list into cmd
  void submit(VkCommandBuffer cmd);        // and wait
  void forget_recorded();

  int index_ = 0;
  std::string name_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  PFN_vkCmdPushDescriptorSetKHR push_descriptors_ = nullptr;
  VkPhysicalDeviceMemoryProperties memory_{};
  VkDeviceSize max_range_ = 0, align_ = 16;
  std::map<std::string, std::vector<std::unique_ptr<Pipeline> >, std::less<> > pipelines_;  // by name, then spec
  std::vector<Dispatch> pending_;
  std::vector<uint64_t> key_;  // pending_'s fields, as flush compares them
  std::vector<Recorded> recorded_;
  uint64_t submissions_ = 0, reused_ = 0, uses_ = 0;
  size_t budget_ = 0, allocated_ = 0;
  bool coop_ = false;
  std::string coop_absent_;
};

}  // namespace kestrel::vk
