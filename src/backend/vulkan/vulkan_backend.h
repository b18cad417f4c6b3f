#pragma once
// The GPU backend on Vulkan compute (docs/gpu.md). Weights are uploaded at load in their GGUF block formats
// and dequantized inside the shaders; activations live in device buffers the host can map. The operators it
// has shaders for are recorded into a command buffer; any other operator runs on the CPU backend it wraps,
// after the recorded work is submitted and finished, on the same buffers (so every model runs, and the
// split is written down in describe() and docs/gpu.md).
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/error.h"

namespace kestrel {

// Parses a --device value: "cpu" (-1) or "vulkan" / "vulkan:N" (N, default 0); Error naming the value if not.
int parse_device(const std::string& value);

struct VulkanOptions {
  int device = 0;  // the index `kestrel hw` lists
  // --gpu-layers: layers [0, N) on the device, the later ones (their weights and operators) on the CPU, and
  // the embedding and output head on the device only when every layer is; -1: all of it on the device.
  int gpu_layers = -1;
  int n_layer = 0;  // the model's layer count (block_count), to tell where the output head goes
  // --cpu-moe: the routed experts' weights stay in host memory and their products run on the CPU.
  bool cpu_moe = false;
  // --gpu-memory: > 0: the backend's buffers (weights, KV pools, activations, staging) may take at most this many
  // bytes of device memory: a load that needs more fails naming the weight or pool that did not fit (fewer
  // --gpu-layers, a smaller context then fit); a request that needs more fails, the server goes on.
  int64_t memory_limit = 0;
  // Prefill on matrix units (VK_NV_cooperative_matrix, docs/gpu.md): where the device has them and they pass
  // a self-check at load (Auto), never (Off), or their plain-GLSL model on any device (Emulated: tests).
  enum class Coop { Auto, Off, Emulated } coop = Coop::Auto;
  // > 0 holds every buffer binding to that many bytes (tests: the path a matrix larger than the device's
  // maxStorageBufferRange takes, in parts).
  size_t max_binding_bytes = 0;
};

// The backend on a Vulkan device, falling back to `host` for the operators it has no shader for (and the
// layers --gpu-layers leaves out). Error naming why when there is no such device or the build has no Vulkan.
std::unique_ptr<Backend> make_vulkan_backend(const VulkanOptions& options, std::unique_ptr<Backend> host);

// A named operator's Vulkan kernel (backend/operator.h; its own file under src/ops/, beside its shader
// src/ops/<shader>.comp, which the build compiles and embeds) records through this, given as the device context
// of the kernel kind kVulkanKernel. The backend binds the buffers (its device memory, or host memory it stages).
inline constexpr const char* kVulkanKernel = "vulkan";
struct VulkanBuffer {
  enum class Use { In, Out, InOut };
  Act act;
  int64_t floats = 0;
  Use use = Use::In;
};
class VulkanOpContext {
 public:
  virtual ~VulkanOpContext() = default;
  // Records `shader` over `invocations` invocations in workgroups of 64 (spread over y past the dispatch limit:
  // invocation i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64), buffers bound
  // 0, 1, ... in order; its push constants: each buffer's float offset in its binding (uint, in binding order),
  // then `push`.
  virtual void dispatch(const char* shader, std::initializer_list<VulkanBuffer> buffers, const void* push,
                        uint32_t push_bytes, int64_t invocations) = 0;
  // A size or count as the shaders' 32-bit uint (the backend's own kernels' too); Error naming the operator
  // (`op`) and the size past 2^32.
  static uint32_t u32(int64_t v, const char* op = "a Vulkan operator") {
    if (v < 0 || v > UINT32_MAX) throw Error(std::string(op) + "'s size " + std::to_string(v) + " does not fit 32 bits");
    return static_cast<uint32_t>(v);
  }
};

// What a Vulkan backend did so far (tests and --log: which operators ran where); null for other backends.
// Products of at least this many tokens (prefill) run on the tiled kernel (64 rows by 32 tokens a workgroup,
// through shared memory); fewer (decode) on the row-parallel one.
constexpr int64_t kVulkanTiledTokens = 16;

struct DeviceCounters {
  std::string device;        // "Vulkan 0: llvmpipe (LLVM 15.0.6, 256 bits)"
  uint64_t dispatches = 0;   // shader dispatches recorded
  uint64_t tiled = 0;        // ...of which tiled matrix products (kVulkanTiledTokens tokens or more)
  uint64_t coop = 0;         // ...of which on matrix units (cooperative matrices, or their model)
  uint64_t routed = 0;       // tokens MoE-routed on the device
  uint64_t argmax_rows = 0;  // logits rows whose argmax the device took (greedy steps download ids)
  uint64_t top_k_rows = 0;   // ...and whose top-k (sampled steps download k ids and logits)
  uint64_t submissions = 0;  // command buffers submitted
  uint64_t reused = 0;       // ...of which recorded before (a step of a shape seen before)
  uint64_t host_ops = 0;     // operators run on the CPU backend instead
  uint64_t device_ops = 0;   // named operators (backend/operator.h) run by their Vulkan kernels
  int64_t weight_bytes = 0;  // weights uploaded to the device
  int64_t kv_bytes = 0;      // KV pools in device memory (Backend::kv_memory)
  int gpu_layers = -1, n_layer = 0;  // VulkanOptions'
  bool cpu_moe = false;
  // "layers 0-9 and the output head on the device, layers 10-31 on the CPU; routed experts on the CPU"
  std::string placement() const;
};
const DeviceCounters* device_counters(const Backend& backend);

}  // namespace kestrel
