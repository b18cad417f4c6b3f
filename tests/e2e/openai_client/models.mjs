// Several models behind one server through the stock clients (tests/e2e/test_server_models.cpp): a server with
// models a, b, c (c pinned), a corrupt file and --models-max 2. The openai client switches models per request
// (each reply's tokens, for the test to compare with single-model servers); the loads evict the least recently
// used unpinned idle model (the states after each step); a model with a request in flight is not evicted (the
// refusal while a stream runs); the corrupt file fails its own requests only; Ollama's keep_alive 0 through the
// ollama client unloads (the server's resident memory before and after, read from /proc). Prints one JSON line.
// Environment: KESTREL_URL (the server's root), KESTREL_PID (its process id).
import OpenAI from "openai";
import { Ollama } from "ollama";
import { readFileSync } from "node:fs";

const url = process.env.KESTREL_URL;
const openai = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0 });
const ollama = new Ollama({ host: url });
const seen = {};
const states = async () => {
  const list = await openai.models.list();
  return Object.fromEntries(list.data.map((m) => [m.id, m.status.value + (m.status.failed ? ":failed" : "")]));
};
const ask = async (model, prompt = "Once upon a time") => {
  const r = await openai.completions.create({ model, prompt, max_tokens: 8, temperature: 0, logprobs: 3 });
  const l = r.choices[0].logprobs;
  return { tokens: l.tokens, token_logprobs: l.token_logprobs, top_logprobs: l.top_logprobs };
};
const rss = () => {
  const m = readFileSync(`/proc/${process.env.KESTREL_PID}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
  return Number(m[1]) * 1024;
};
const refusal = async (f) => {
  try {
    await f();
    return { status: 200 };
  } catch (e) {
    return { status: e.status, message: e.error?.message ?? e.message };
  }
};

seen.listed = await states();

// c then a load; b evicts a (c, the least recently used, is pinned); a evicts b.
seen.replies = [];
for (const m of ["c", "a"]) seen.replies.push([m, await ask(m)]);
seen.after_ca = await states();
seen.replies.push(["b", await ask("b")]);
seen.after_b = await states();
seen.replies.push(["a", await ask("a")]);
seen.after_a = await states();
// Switching per request, each reply recorded.
for (const m of ["b", "c", "a", "b", "c", "a"]) seen.replies.push([m, await ask(m, "The little dog")]);

// A stream in flight on b: loading a (which needs b's room: c is pinned) is refused, naming b as busy.
await ask("b");
const controller = new AbortController();
const stream = await openai.completions.create({ model: "b", prompt: "Long", max_tokens: 3000, temperature: 0,
                                                 stream: true }, { signal: controller.signal });
const it = stream[Symbol.asyncIterator]();
await it.next();
seen.busy = await refusal(() => ask("a"));
seen.during_stream = await states();
controller.abort();
try { while (!(await it.next()).done); } catch (e) { /* aborted */ }
// Once the stream is gone b is idle again (the server sees the close at once; a moment for its lease).
for (let i = 0; i < 50; i++) {
  const r = await refusal(() => ask("a"));
  if (r.status === 200) break;
  await new Promise((res) => setTimeout(res, 100));
}
seen.after_stream = await states();

// The corrupt file: its requests fail with the reason, and the others go on.
seen.broken = await refusal(() => ask("broken"));
seen.broken_again = await refusal(() => ask("broken"));
seen.after_broken = await ask("a");
seen.with_broken = await states();

// keep_alive 0 through the ollama client: the reply, then the model unloads and its memory goes back.
seen.ps_before = (await ollama.ps()).models.map((m) => ({ name: m.name, size: m.size, expires_at: m.expires_at }));
seen.rss_loaded = rss();
const chat = await ollama.chat({ model: "a", messages: [{ role: "user", content: "hi" }], stream: false,
                                 keep_alive: 0, options: { num_predict: 4 } });
seen.keep_alive_reply = chat.message.content.length > 0 || chat.done_reason === "length";
for (let i = 0; i < 100 && (await states()).a !== "unloaded"; i++) await new Promise((res) => setTimeout(res, 50));
seen.ps_after = (await ollama.ps()).models.map((m) => m.name);
seen.rss_unloaded = rss();
seen.after_keep_alive = await states();

seen.metrics = await (await fetch(url + "/metrics")).text();
console.log(JSON.stringify(seen));
