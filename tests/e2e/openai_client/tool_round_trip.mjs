// The official OpenAI client (npm `openai`) against a Kestrel server running a tiny model with its family's
// real chat template (DeepSeek-V3.2/V4's DSML, gpt-oss's harmony, ...): a chat, a streamed chat, and a
// tool-call round trip (tool_choice "required": the reply is held to the template's form of a call, read back
// as tool_calls, streamed as deltas; then the tool's answer goes back). Prints one JSON line of what it saw.
// Environment: KESTREL_URL (…/v1); KESTREL_CALL_BODY (optional JSON) adds fields to the forced-call requests
// (a template that opens reasoning by default: {"chat_template_kwargs": {"enable_thinking": false}}).
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.KESTREL_URL, apiKey: "none", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const seen = {};

const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Hello" }], max_tokens: 4, temperature: 0,
});
seen.chat = { finish: chat.choices[0].finish_reason, tokens: chat.usage.completion_tokens,
              text: (chat.choices[0].message.content ?? "") + (chat.choices[0].message.reasoning_content ?? "") };

let chunks = 0;
for await (const chunk of await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0, stream: true,
})) chunks++;
seen.stream = { chunks };

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather of a city",
    // Bounded values: a random-weight model's free string or number may not end within max_tokens.
    parameters: { type: "object",
                  properties: { city: { type: "string", enum: ["Paris", "Lyon"] }, metric: { type: "boolean" } },
                  required: ["city", "metric"] },
  },
}];
const ask = [{ role: "user", content: "Weather in Paris for 2 days?" }];
const extra = process.env.KESTREL_CALL_BODY ? JSON.parse(process.env.KESTREL_CALL_BODY) : {};
const call = await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 600, temperature: 0, ...extra,
});
const tc = call.choices[0].message.tool_calls ?? [];
seen.call = { finish: call.choices[0].finish_reason, n: tc.length, name: tc[0]?.function.name,
              args: tc[0] ? JSON.parse(tc[0].function.arguments) : null };

// The same call streamed: deltas of one call whose arguments concatenate to the same JSON.
let name = "", args = "", finish = null;
for await (const chunk of await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 600, temperature: 0,
  stream: true, ...extra,
})) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
    name += d.function?.name ?? "";
    args += d.function?.arguments ?? "";
  }
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
seen.stream_call = { finish, name, args: args ? JSON.parse(args) : null };

// The round trip: the call and the tool's answer go back through the template.
const answer = await client.chat.completions.create({
  model,
  messages: [...ask, call.choices[0].message, { role: "tool", tool_call_id: tc[0]?.id ?? "x", content: "Sunny, 21 C" }],
  max_tokens: 4,
  temperature: 0,
});
seen.answer = { finish: answer.choices[0].finish_reason, tokens: answer.usage.completion_tokens };
console.log(JSON.stringify(seen));
