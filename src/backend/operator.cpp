#include "backend/operator.h"

#include <cstring>
#include <string>

namespace kestrel {
namespace {
std::vector<const Operator*>& registry() {
  static std::vector<const Operator*> ops;
  return ops;
}
}  // namespace

Operator::Operator(const char* name, std::initializer_list<DeviceEntry> device) : name_(name), device_(device) {
  registry().push_back(this);
}

Operator::DeviceKernel Operator::device_kernel(const char* kind) const {
  for (const auto& [kd, fn] : device_)
    if (std::strcmp(kd, kind) == 0) return fn;
  return nullptr;
}

std::vector<const char*> Operator::device_kinds() const {
  std::vector<const char*> out;
  for (const auto& [kd, fn] : device_) out.push_back(kd);
  return out;
}

const std::vector<const Operator*>& operators() { return registry(); }

std::string operator_list() {
  std::string out;
  for (const Operator* op : operators()) {
    if (!out.empty()) out += ", ";
    out += op->name();
    out += " (host";
    for (const char* kind : op->device_kinds()) out += std::string(", ") + kind;
    out += ")";
  }
  return out;
}

void Backend::run(const Operator& op, const void* args) {
  static ThreadPool inline_pool(1);  // runs a job on the calling thread
  op.run_host(OpContext(inline_pool), args);
}

}  // namespace kestrel
