#pragma once
// A Backend that times every call of the one it wraps and records it in a
// Profiler, with the bytes each operator moves and the FLOPs it performs.
#include <memory>

#include "backend/backend.h"
#include "core/profiler.h"

namespace kestrel {

std::unique_ptr<Backend> make_profiling_backend(Backend& inner, Profiler& profiler);

}  // namespace kestrel
