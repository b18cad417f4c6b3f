#pragma once
// The GPU backend on Vulkan compute (docs/gpu.md). Weights are uploaded at load in their GGUF block formats
// and dequantized inside the shaders; activations live in device buffers the host can map. The operators it
// has shaders for are recorded into a command buffer; any other operator runs on the CPU backend it wraps,
// after the recorded work is submitted and finished, on the same buffers (so every model runs, and the
// split is written down in describe() and docs/gpu.md).
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace kestrel {

// Parses a --device value: "cpu" (-1) or "vulkan" / "vulkan:N" (N, default 0); Error naming the value if not.
int parse_device(const std::string& value);

// The backend on Vulkan device `index` (the order `kestrel hw` lists), falling back to `host` for the
// operators it has no shader for. Error naming why when there is no such device or the build has no Vulkan.
// max_binding_bytes > 0 holds every buffer binding to that many bytes (tests: the path a matrix larger than
// the device's maxStorageBufferRange takes, in parts).
std::unique_ptr<Backend> make_vulkan_backend(int index, std::unique_ptr<Backend> host, size_t max_binding_bytes = 0);

// What a Vulkan backend did so far (tests and --log: which operators ran where); null for other backends.
struct DeviceCounters {
  std::string device;        // "Vulkan 0: llvmpipe (LLVM 15.0.6, 256 bits)"
  uint64_t dispatches = 0;   // shader dispatches recorded
  uint64_t submissions = 0;  // command buffers submitted
  uint64_t host_ops = 0;     // operators run on the CPU backend instead
};
const DeviceCounters* device_counters(const Backend& backend);

}  // namespace kestrel
