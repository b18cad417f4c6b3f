#pragma once
// Named operators: everything a model needs beyond the backend's fixed core (backend/backend.h: products,
// norms, element-wise, attention and the KV cache, routing, sampling reductions). A family's own mixing
// (DeepSeek-V4's hyper-connections, Qwen3.5's Gated DeltaNet) or a vision tower's patch convolution is one
// operator in its own file under src/ops/, holding its arguments, its host kernel (what the CPU backend and
// any backend without a kernel of its own runs), its cost for the profiler and, where a device has one, its
// device kernel. Model code calls it as `op(backend, args)`; the backend runs it through Backend::run, which
// every wrapper (profiling, forwarding, the tests' guarded backend, a device falling back to the CPU) wraps
// once for all operators. Adding an operator touches its own files and nothing else (docs/architecture.md).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "backend/backend.h"

namespace kestrel {

// What an operator's host kernel runs with: the host memory of the buffers of a backend whose buffers are
// host memory, and that backend's threads (one, inline, where it has none of its own).
class OpContext {
 public:
  explicit OpContext(ThreadPool& pool) : pool_(pool) {}
  static float* host(Act a) { return static_cast<float*>(a.base_) + a.offset_; }
  ThreadPool& pool() const { return pool_; }

 private:
  ThreadPool& pool_;
};

// Bytes moved and flops done by one call (the profiler's roofline columns).
struct OpCost {
  double bytes = 0, flops = 0;
};

class Operator {
 public:
  Operator(const Operator&) = delete;
  Operator& operator=(const Operator&) = delete;
  virtual ~Operator() = default;
  const char* name() const { return name_; }
  // The host kernel over type-erased arguments (the operator's own Args).
  virtual void run_host(const OpContext& c, const void* args) const = 0;
  virtual OpCost cost(const void* args) const = 0;

  // A device backend's kernel for this operator (`kind`: "vulkan", backend/vulkan/vulkan_backend.h), given by the
  // operator's file beside its shader; the device backend calls it with its own recording context. Null: the
  // backend runs the host kernel on its buffers after finishing its recorded work.
  using DeviceKernel = void (*)(void* device_context, const void* args);
  struct DeviceEntry {
    const char* kind;
    DeviceKernel kernel;
  };
  // Listed in operators() from then on.
  explicit Operator(const char* name, std::initializer_list<DeviceEntry> device = {});
  DeviceKernel device_kernel(const char* kind) const;
  // The kinds with a kernel of their own ("vulkan"), for `kestrel hw`.
  std::vector<const char*> device_kinds() const;

 private:
  const char* name_;
  std::vector<DeviceEntry> device_;
};

// Every named operator linked into the program, in the order they were constructed.
const std::vector<const Operator*>& operators();
// "name (host, vulkan), ..." (kestrel hw, describe).
std::string operator_list();

// An operator over arguments of type Args (a struct of the operator's buffers and parameters).
template <class Args>
class Op final : public Operator {
 public:
  using Host = void (*)(const OpContext&, const Args&);
  using Cost = OpCost (*)(const Args&);
  Op(const char* name, Host host, Cost cost, std::initializer_list<DeviceEntry> device = {})
      : Operator(name, device), host_(host), cost_(cost) {}

  void operator()(Backend& be, const Args& a) const { be.run(*this, &a); }
  // The arguments of a call a wrapper watches, when `op` is this operator (else null).
  const Args* args_if(const Operator& op, const void* args) const {
    return &op == this ? static_cast<const Args*>(args) : nullptr;
  }
  void run_host(const OpContext& c, const void* a) const override { host_(c, *static_cast<const Args*>(a)); }
  OpCost cost(const void* a) const override { return cost_(*static_cast<const Args*>(a)); }

 private:
  Host host_;
  Cost cost_;
};

}  // namespace kestrel
