// The official OpenAI client (npm `openai`) against a Kestrel server, as an
// application would use it. Prints one JSON line of what it saw; the C++
// test checks it. Environment: KESTREL_URL (…/v1), KESTREL_KEY, and for
// HTTPS with a self-signed certificate NODE_EXTRA_CA_CERTS.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.KESTREL_URL, apiKey: process.env.KESTREL_KEY, maxRetries: 0 });
const seen = {};

const models = await client.models.list();
seen.models = models.data.map((m) => m.id);

const chat = await client.chat.completions.create({
  model: seen.models[0],
  messages: [{ role: "user", content: "Tell me a story" }],
  max_tokens: 4,
  temperature: 0,
});
seen.chat = { object: chat.object, finish: chat.choices[0].finish_reason, tokens: chat.usage.completion_tokens };

let streamed = "";
let chunks = 0;
const stream = await client.chat.completions.create({
  model: seen.models[0],
  messages: [{ role: "user", content: "Hi" }],
  max_tokens: 4,
  temperature: 0,
  stream: true,
});
for await (const chunk of stream) {
  chunks++;
  streamed += chunk.choices[0]?.delta?.content ?? "";
}
seen.stream = { chunks, chars: streamed.length };

const completion = await client.completions.create({ model: seen.models[0], prompt: "Once", max_tokens: 3 });
seen.completion = { object: completion.object, tokens: completion.usage.completion_tokens };

const wrong = new OpenAI({ baseURL: process.env.KESTREL_URL, apiKey: "sk-wrong", maxRetries: 0 });
try {
  await wrong.models.list();
  seen.wrong_key = "accepted";
} catch (e) {
  seen.wrong_key = { status: e.status, name: e.constructor.name, code: e.code };
}
console.log(JSON.stringify(seen));
