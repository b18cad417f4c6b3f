// The table of architectures, one entry per file under model/arch/.
#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/family.h"

namespace kestrel {

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = {
      &llama_family(), &qwen2_family(),  &qwen2moe_family(), &qwen3_family(),     &qwen3moe_family(),
      &phi3_family(),  &gemma2_family(), &gemma3_family(),   &deepseek2_family(), &mistral4_family(), &deepseek32_family(), &glm_dsa_family(), &deepseek4_family(),
      &gpt_oss_family(), &mistral3_family(), &glm4moe_family(), &llama4_family(), &gemma4_family(), &qwen3next_family(), &qwen35_family(),
      &qwen35moe_family(),
  };
  return all;
}

const Family* find_family(const std::string& arch) {
  for (const Family* f : families())
    if (arch == f->name) return f;
  return nullptr;
}

std::string supported_architectures() {
  std::string names;
  for (const Family* f : families()) names += (names.empty() ? "" : ", ") + std::string(f->name);
  return names;
}

const Family& family_of(const std::string& arch) {
  if (const Family* f = find_family(arch)) return *f;
  throw Error(fmt::format("architecture '{}' is not supported (supported: {})", arch, supported_architectures()));
}

}  // namespace kestrel
