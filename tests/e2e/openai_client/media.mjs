// Images through the stock clients (npm `openai`, `@anthropic-ai/sdk`, `ollama`) against a Kestrel server with an
// mmproj (tests/e2e/test_server_media.cpp): the recorded llama-server requests through the OpenAI client (their
// reply tokens and logprobs), the same image and text through all three clients, four different image requests at
// once and one at a time, a second turn about the same image (its cached tokens), a Responses input_image, and a
// corrupt image. Prints one JSON line of what it saw.
// Environment: KESTREL_URL (the server's root), KESTREL_CASES (a JSON file: the recorded server cells, with each
// image part's file path), KESTREL_IMAGES (a JSON list of image file paths).
import fs from "node:fs";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";

const url = process.env.KESTREL_URL;
const openai = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
const ollama = new Ollama({ host: url });
const cases = JSON.parse(fs.readFileSync(process.env.KESTREL_CASES, "utf8"));
const images = JSON.parse(process.env.KESTREL_IMAGES).map((p) => fs.readFileSync(p).toString("base64"));
const dataUri = (b64) => "data:image/png;base64," + b64;
const seen = {};

// The recorded requests.
seen.recorded = [];
for (const c of cases) {
  const content = c.parts.map(([kind, value]) =>
    kind === "text" ? { type: "text", text: value }
                    : { type: "image_url", image_url: { url: dataUri(fs.readFileSync(value).toString("base64")) } });
  const r = await openai.chat.completions.create({ model: "tiny", messages: [{ role: "user", content }],
    max_tokens: c.max_tokens, temperature: 0, logprobs: true, top_logprobs: 1 });
  seen.recorded.push({ name: c.name, content: r.choices[0].message.content, prompt_tokens: r.usage.prompt_tokens,
                       tokens: r.choices[0].logprobs.content.map((t) => t.token),
                       logprobs: r.choices[0].logprobs.content.map((t) => t.logprob) });
}

// One image, then a question, through each API.
const question = "What is in this picture?";
const greedy = { max_tokens: 8, temperature: 0 };
const oa = await openai.chat.completions.create({ model: "tiny", ...greedy, messages: [{ role: "user", content: [
  { type: "image_url", image_url: { url: dataUri(images[0]) } }, { type: "text", text: question }] }] });
seen.openai = { text: oa.choices[0].message.content, prompt_tokens: oa.usage.prompt_tokens };
const an = await anthropic.messages.create({ model: "tiny", ...greedy, messages: [{ role: "user", content: [
  { type: "image", source: { type: "base64", media_type: "image/png", data: images[0] } },
  { type: "text", text: question }] }] });
seen.anthropic = { text: an.content.map((b) => b.text).join(""), input_tokens: an.usage.input_tokens +
  (an.usage.cache_read_input_tokens ?? 0) + (an.usage.cache_creation_input_tokens ?? 0) };
const ol = await ollama.chat({ model: "tiny", messages: [{ role: "user", content: question, images: [images[0]] }],
                               options: { temperature: 0, num_predict: 8 } });
seen.ollama = { text: ol.message.content, prompt_eval_count: ol.prompt_eval_count };
const rs = await openai.responses.create({ model: "tiny", max_output_tokens: 8, temperature: 0, input: [{ role: "user",
  content: [{ type: "input_image", image_url: dataUri(images[0]) }, { type: "input_text", text: question }] }] });
seen.responses = { text: rs.output_text, input_tokens: rs.usage.input_tokens };

// Four different image requests at once, then one at a time.
const ask = (i) => openai.chat.completions.create({ model: "tiny", max_tokens: 6, temperature: 0, messages: [{
  role: "user", content: [{ type: "text", text: "Picture " + i }, { type: "image_url", image_url: { url: dataUri(images[i % images.length]) } }] }] });
const together = await Promise.all([0, 1, 2, 3].map(ask));
const alone = [];
for (const i of [0, 1, 2, 3]) alone.push(await ask(i));
seen.together = together.map((r) => r.choices[0].message.content);
seen.alone = alone.map((r) => r.choices[0].message.content);

// A second turn about the same image: the first turn's prompt, image included, comes from the prefix cache.
const turn1 = [{ role: "user", content: [{ type: "image_url", image_url: { url: dataUri(images[1]) } },
                                          { type: "text", text: "Describe it." }] }];
const first = await openai.chat.completions.create({ model: "tiny", max_tokens: 4, temperature: 0, messages: turn1 });
const second = await openai.chat.completions.create({ model: "tiny", max_tokens: 4, temperature: 0, messages: [...turn1,
  { role: "assistant", content: first.choices[0].message.content }, { role: "user", content: "And the colours?" }] });
seen.turns = { first_prompt: first.usage.prompt_tokens, second_prompt: second.usage.prompt_tokens,
               second_cached: second.usage.prompt_tokens_details?.cached_tokens ?? 0 };

// A corrupt image: a 400 that names the part.
try {
  await openai.chat.completions.create({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: [
    { type: "text", text: "x" }, { type: "image_url", image_url: { url: dataUri(images[0].slice(0, 200)) } }] }] });
  seen.corrupt = { status: 200 };
} catch (e) {
  seen.corrupt = { status: e.status, message: e.message };
}
console.log(JSON.stringify(seen));
