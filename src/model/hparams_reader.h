#pragma once
// Reads an architecture's hyperparameters ("{arch}.KEY") from a GGUF file and
// remembers which keys were read. finish() refuses any key of the
// architecture's namespace that nobody read — a soft-cap, a sliding window,
// a scaling rule that Kestrel would otherwise silently leave out — except the
// few known not to change the arithmetic. Errors name the file and the key.
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kestrel {

class HparamReader {
 public:
  HparamReader(const GgufFile& file, std::string arch);

  const std::string& arch() const { return arch_; }
  const GgufFile& file() const { return f_; }
  bool has(const std::string& key) const { return f_.find(full(key)) != nullptr; }

  // Required and positive.
  int64_t need_int(const std::string& key);
  // Optional, not negative.
  std::optional<int64_t> opt_int(const std::string& key);
  int64_t int_or(const std::string& key, int64_t dflt) { return opt_int(key).value_or(dflt); }
  // Optional and finite.
  std::optional<double> opt_float(const std::string& key);
  double float_or(const std::string& key, double dflt) { return opt_float(key).value_or(dflt); }
  std::optional<std::string> opt_string(const std::string& key);
  std::optional<bool> opt_bool(const std::string& key);
  // Marks a key as handled without reading it through here.
  void accept(const std::string& key) { read_.insert(key); }

  // "FILE: metadata 'ARCH.KEY' WHY"
  Error bad(const std::string& key, const std::string& why) const;
  // Throws naming the first key of the architecture's namespace nobody read.
  void finish() const;

 private:
  std::string full(const std::string& key) const { return arch_ + "." + key; }
  const GgufFile& f_;
  std::string arch_;
  std::set<std::string> read_;
};

// Refuses files that are one part of a split GGUF (`split.count` > 1): the
// tensors of the other parts would be missing.
void check_not_split(const GgufFile& file);

}  // namespace kestrel
