#pragma once
// Each architecture's entry, defined in its own file here; model/families.cpp
// lists them in one table.
#include "model/family.h"

namespace kestrel {

const Family& llama_family();
const Family& qwen2_family();
const Family& qwen2moe_family();
const Family& qwen3_family();
const Family& qwen3moe_family();
const Family& phi3_family();
const Family& gemma2_family();
const Family& gemma3_family();
const Family& deepseek2_family();
const Family& mistral4_family();
const Family& deepseek32_family();

}  // namespace kestrel
