// The official Ollama client (npm `ollama`) against a Kestrel server running a tiny reasoning model with a
// tool-call format (tests/e2e/test_server_apis.cpp): the listings it probes, a chat (whole and streamed), a
// generation (templated and raw), JSON format through the grammar, a tool call, thinking, logprobs, and errors.
// Prints one JSON line of what it saw. Environment: KESTREL_URL (the server's root).
import { Ollama } from "ollama";

const ollama = new Ollama({ host: process.env.KESTREL_URL });
const model = "tiny:latest";
const seen = {};
const greedy = { temperature: 0, num_predict: 6 };

seen.version = await ollama.version();
seen.list = (await ollama.list()).models.map((m) => ({ name: m.name, family: m.details.family, size: m.size }));
seen.ps = (await ollama.ps()).models.map((m) => m.name);
const show = await ollama.show({ model });
seen.show = { capabilities: show.capabilities, family: show.details.family, template: show.template.length };

const chat = await ollama.chat({ model, messages: [{ role: "user", content: "Hello" }], think: false, options: greedy });
seen.chat = { role: chat.message.role, content: chat.message.content, done: chat.done, reason: chat.done_reason,
              eval_count: chat.eval_count, prompt_eval_count: chat.prompt_eval_count,
              durations: [chat.total_duration, chat.prompt_eval_duration, chat.eval_duration].every((d) => d >= 0) };

let streamed = "", parts = 0, last = null;
for await (const part of await ollama.chat({ model, messages: [{ role: "user", content: "Hello" }], think: false,
                                             options: greedy, stream: true })) {
  parts++;
  streamed += part.message.content;
  last = part;
}
seen.stream = { content: streamed, parts, done: last.done, reason: last.done_reason, eval_count: last.eval_count };

const gen = await ollama.generate({ model, prompt: "Hello", system: "Be brief.", think: false, options: greedy });
seen.generate = { response: gen.response, done: gen.done, eval_count: gen.eval_count };
const raw = await ollama.generate({ model, prompt: "Once upon a time", raw: true, options: greedy });
seen.raw = { response: raw.response, eval_count: raw.eval_count, prompt_eval_count: raw.prompt_eval_count };

// format: a schema through the grammar — the reply parses and has the fields.
const schema = { type: "object", properties: { raining: { type: "boolean" }, city: { type: "string", enum: ["Paris", "Lyon"] } },
                 required: ["raining", "city"] };
const formatted = await ollama.chat({ model, messages: [{ role: "user", content: "Weather?" }], think: false,
                                      format: schema, options: { temperature: 0, num_predict: 200 } });
seen.format = JSON.parse(formatted.message.content);

const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Lyon"] } }, required: ["city"] } } }];
const called = await ollama.chat({ model, messages: [{ role: "user", content: "Weather in Paris?" }], tools, think: false,
                                   options: { temperature: 0, num_predict: 200 } });
seen.tools = { calls: called.message.tool_calls ?? [], content: called.message.content };
// The round trip: an earlier call and its answer go back through the template.
const answered = await ollama.chat({ model, think: false, tools, options: greedy, messages: [
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
  { role: "tool", content: "18 C", tool_name: "get_weather" }] });
seen.answered = { eval_count: answered.eval_count };

const thought = await ollama.chat({ model, messages: [{ role: "user", content: "Think" }], think: true,
                                    options: { temperature: 0, num_predict: 20 } });
seen.think = { thinking: thought.message.thinking?.length ?? 0, content: thought.message.content.length };

const withLogprobs = await ollama.chat({ model, messages: [{ role: "user", content: "Hello" }], think: false,
                                         options: greedy, logprobs: true, top_logprobs: 2 });
seen.logprobs = (withLogprobs.logprobs ?? []).map((l) => ({ token: l.token, logprob: l.logprob, top: l.top_logprobs?.length }));

// Embeddings (the server pools the last row: --pooling last), one vector per input, unit length.
const embedded = await ollama.embed({ model, input: ["Hello", "Weather in Paris?"] });
seen.embed = { count: embedded.embeddings.length, dim: embedded.embeddings[0].length,
               norm: Math.hypot(...embedded.embeddings[0]), prompt_eval_count: embedded.prompt_eval_count };

async function failure(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return { name: e.name, status: e.status_code, message: e.error ?? e.message };
  }
}
seen.unknown_model = await failure(() => ollama.chat({ model: "llama9", messages: [{ role: "user", content: "x" }] }));
seen.bad_option = await failure(() => ollama.chat({ model, messages: [{ role: "user", content: "x" }],
                                                    options: { mirostat: 2 } }));
seen.image = await failure(() => ollama.chat({ model, messages: [{ role: "user", content: "x", images: ["aGk="] }] }));

console.log(JSON.stringify(seen));
