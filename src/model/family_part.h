#pragma once
// A family's own part of a shared struct (ModelConfig::family, SynthShape::family): a value of the family's
// own type (model/arch/<family>.h: e.g. Dsv4Config, SynthDsv4), so that shared headers carry no field named
// after a family. The family reaches it through these, and nothing else needs to.
#include <any>
#include <typeinfo>

#include "core/error.h"

namespace kestrel {

// The part as T, made (default values) when the struct has none yet.
template <class T>
T& family_part(std::any& part) {
  if (!part.has_value()) part = T{};
  T* p = std::any_cast<T>(&part);
  if (!p) throw Error(std::string("a family's configuration read as another's (") + typeid(T).name() + ")");
  return *p;
}

// The part as T, or null when it holds none (or another family's).
template <class T>
const T* family_part_if(const std::any& part) {
  return std::any_cast<T>(&part);
}

// The part as T; T's default values when the struct has none (a shape that sets nothing of its own).
template <class T>
const T& family_part(const std::any& part) {
  static const T none{};
  if (!part.has_value()) return none;
  const T* p = std::any_cast<T>(&part);
  if (!p) throw Error(std::string("a family's configuration read as another's (") + typeid(T).name() + ")");
  return *p;
}

}  // namespace kestrel
