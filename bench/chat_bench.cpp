// What a chat template costs per request: parsing real templates once, and
// rendering a 10-turn conversation with two tools through them (the server
// does the latter for every chat request, on its parser threads).
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"

namespace {

using json = nlohmann::ordered_json;

std::string template_source(const std::string& name) {
  std::ifstream in(std::string(KESTREL_SHARED_DIR) + "/templates/" + name + ".jinja", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* const kTemplates[] = {"Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct",
                                  "deepseek-ai-DeepSeek-V3.1", "mistralai-Mistral-Nemo-Instruct-2407"};

json conversation() {
  json m = json::array({{{"role", "system"}, {"content", "You are a helpful assistant. Answer briefly."}}});
  for (int i = 0; i < 5; i++) {
    m.push_back({{"role", "user"}, {"content", "Tell me something about the number " + std::to_string(i) + "."}});
    m.push_back({{"role", "assistant"}, {"content", "The number " + std::to_string(i) + " is a fine number, used often."}});
  }
  m.push_back({{"role", "user"}, {"content", "And the weather in Paris?"}});
  return m;
}

json tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}},
   {"type": "function", "function": {"name": "get_time", "description": "Local time of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

void BM_TemplateParse(benchmark::State& state) {
  const std::string src = template_source(kTemplates[state.range(0)]);
  for (auto _ : state) benchmark::DoNotOptimize(kestrel::ChatTemplate("bench", src));
  state.SetLabel(kTemplates[state.range(0)]);
}
BENCHMARK(BM_TemplateParse)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

void BM_TemplateRender(benchmark::State& state) {
  const kestrel::ChatTemplate t("bench", template_source(kTemplates[state.range(0)]), "<s>", "</s>");
  const json messages = conversation(), fns = tools();
  size_t bytes = 0;
  for (auto _ : state) {
    const auto r = t.render(messages, fns, json::object(), true);
    bytes = r.text.size();
    benchmark::DoNotOptimize(r);
  }
  state.SetLabel(std::string(kTemplates[state.range(0)]) + ", " + std::to_string(bytes) + " bytes out");
}
BENCHMARK(BM_TemplateRender)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
