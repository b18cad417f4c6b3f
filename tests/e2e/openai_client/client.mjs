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

// Usage asked for: once, in its own last chunk without choices.
let usageChunks = 0;
const withUsage = await client.chat.completions.create({
  model: seen.models[0],
  messages: [{ role: "user", content: "Hi" }],
  max_tokens: 4,
  stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of withUsage) {
  if (chunk.usage) {
    usageChunks++;
    seen.stream_usage = { tokens: chunk.usage.completion_tokens, choices: chunk.choices.length };
  }
}
seen.stream_usage.chunks = usageChunks;

const card = await client.models.retrieve(seen.models[0]);
seen.card = { id: card.id, object: card.object };

// An agent conversation going on after a tool call: developer turn, the
// assistant's call with null content, the tool's answer.
const agent = await client.chat.completions.create({
  model: seen.models[0],
  messages: [
    { role: "developer", content: "Be" },
    { role: "user", content: "Rain?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call_1", type: "function", function: { name: "rain", arguments: '{"c":1}' } }],
    },
    { role: "tool", tool_call_id: "call_1", content: "no" },
  ],
  max_tokens: 3,
});
seen.agent = { tokens: agent.usage.completion_tokens, finish: agent.choices[0].finish_reason };

// Tools offered (the reply of this tiny model is prose, so no call comes back).
const withTools = await client.chat.completions.create({
  model: seen.models[0],
  messages: [{ role: "user", content: "Rain?" }],
  max_tokens: 3,
  tools: [{ type: "function", function: { name: "rain", parameters: { type: "object", properties: {} } } }],
  tool_choice: "auto",
});
seen.tools = { finish: withTools.choices[0].finish_reason, calls: withTools.choices[0].message.tool_calls ?? null };

// Structured output: a JSON schema held to by constrained decoding.
const structured = await client.chat.completions.create({
  model: seen.models[0],
  messages: [{ role: "user", content: "Is it raining?" }],
  // The schema bounds the answer (whitespace, 16 digits): 400 tokens always hold it whole.
  max_tokens: 400,
  seed: 1,
  response_format: {
    type: "json_schema",
    json_schema: {
      name: "answer",
      strict: true,
      schema: {
        type: "object",
        properties: { raining: { type: "boolean" }, chance: { type: "integer" } },
        required: ["raining", "chance"],
        additionalProperties: false,
      },
    },
  },
});
seen.structured = {
  finish: structured.choices[0].finish_reason,
  parsed: JSON.parse(structured.choices[0].message.content),
};

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
