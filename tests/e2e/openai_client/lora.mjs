// LoRA adapters through the stock clients against a Kestrel server (tests/e2e/test_server_lora.cpp): the model
// list with the --lora-modules names, 16 concurrent requests spread over the 4 adapter models and the base (their
// replies together and one at a time), one adapter through the OpenAI, Anthropic and Ollama clients, a request's
// `lora` field against the adapter's model name, GET/POST /lora-adapters, and refusals. Prints one JSON line.
// Environment: KESTREL_URL (the server's root).
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";

const url = process.env.KESTREL_URL;
const openai = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
const ollama = new Ollama({ host: url });
const seen = {};
const post = async (path, body) => {
  const r = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" },
                                      body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};

seen.models = (await openai.models.list()).data.map((m) => m.id);

// 16 requests at once over tiny (the base with the global adapter) and the four adapters, then one at a time.
const models = ["a", "b", "c", "d"];
const ask = (i) => openai.completions.create({ model: i % 5 === 4 ? "tiny" : models[i % 4], prompt: "Story " + i,
                                               max_tokens: 8, temperature: 0, logprobs: 1 });
const idx = [...Array(16).keys()];
const together = await Promise.all(idx.map(ask));
const alone = [];
for (const i of idx) alone.push(await ask(i));
const tokens = (r) => r.choices[0].logprobs.tokens;
seen.together = together.map(tokens);
seen.alone = alone.map(tokens);

// The same prompt under each adapter: four different replies (and the base's).
const story = (model) => openai.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
seen.per_model = {};
for (const m of ["tiny", ...models]) seen.per_model[m] = (await story(m)).choices[0].text;

// Adapter b through three clients: chat (OpenAI, Anthropic) and a raw generate (Ollama) against completions.
const q = "Tell me about the sea";
seen.chat_openai = (await openai.chat.completions.create({ model: "b", max_tokens: 8, temperature: 0,
  messages: [{ role: "user", content: q }] })).choices[0].message.content;
seen.chat_anthropic = (await anthropic.messages.create({ model: "b", max_tokens: 8, temperature: 0,
  messages: [{ role: "user", content: q }] })).content.map((b) => b.text).join("");
seen.raw_ollama = (await ollama.generate({ model: "b", prompt: "Once upon a time", raw: true,
  options: { temperature: 0, num_predict: 8 } })).response;

// The `lora` field: adapter a's id at scale 1 on the base model's name is model a; [] is no adapter at all.
const list = await (await fetch(url + "/lora-adapters")).json();
seen.adapters = list;
const idOf = (name) => list.find((e) => e.name === name).id;
const withLora = (lora) => openai.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 8,
                                                       temperature: 0, lora });
seen.field_a = (await withLora([{ id: idOf("a"), scale: 1 }])).choices[0].text;
seen.field_none = (await withLora([])).choices[0].text;
seen.completion_a = (await post("/completion", { prompt: "Once upon a time", n_predict: 8, temperature: 0,
                                                   lora: [{ id: idOf("a"), scale: 1 }] })).body.content;

// POST /lora-adapters: the global adapter off, then the base model's replies are the no-adapter ones.
seen.post = await post("/lora-adapters", [{ id: 0, scale: 0 }]);
seen.after_post = (await story("tiny")).choices[0].text;
seen.adapters_after = await (await fetch(url + "/lora-adapters")).json();

// Refusals: an id the server does not have, a malformed list, a POST that is not a list.
try {
  await withLora([{ id: 99, scale: 1 }]);
  seen.bad_id = { status: 200 };
} catch (e) {
  seen.bad_id = { status: e.status, message: e.message };
}
seen.bad_field = await post("/v1/completions", { model: "tiny", prompt: "x", max_tokens: 1, lora: [{ id: 0 }] });
seen.bad_post = await post("/lora-adapters", { id: 0, scale: 1 });
seen.metrics = await (await fetch(url + "/metrics")).text();
console.log(JSON.stringify(seen));
