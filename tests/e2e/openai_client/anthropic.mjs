// The official Anthropic client (npm `@anthropic-ai/sdk`) against a Kestrel server running a tiny reasoning
// model with a tool-call format (tests/e2e/test_server_apis.cpp): a message, a streamed message, token
// counting, a tool-use round trip (whole and streamed), thinking, and errors. Prints one JSON line of what it
// saw. Environment: KESTREL_URL (the server's root), KESTREL_KEY (sent as x-api-key).
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.env.KESTREL_URL, apiKey: process.env.KESTREL_KEY, maxRetries: 0 });
const model = "tiny";
const seen = {};
const off = { type: "disabled" };

const msg = await client.messages.create({
  model, max_tokens: 6, system: "You are terse.", messages: [{ role: "user", content: "Hello" }], thinking: off,
  temperature: 0,
});
seen.message = { type: msg.type, role: msg.role, stop: msg.stop_reason, blocks: msg.content.map((b) => b.type),
                 text: msg.content.find((b) => b.type === "text")?.text ?? "", usage: msg.usage };

// Streamed: the SDK's own event reader and its accumulated final message.
const events = [];
const stream = client.messages.stream({
  model, max_tokens: 6, messages: [{ role: "user", content: "Hello" }], thinking: off, temperature: 0,
});
for await (const e of stream) events.push(e.type + (e.delta?.type ? ":" + e.delta.type : ""));
const final = await stream.finalMessage();
seen.stream = { events, text: final.content.find((b) => b.type === "text")?.text ?? "", stop: final.stop_reason,
                output_tokens: final.usage.output_tokens };

seen.count = await client.messages.countTokens({
  model, system: "You are terse.", messages: [{ role: "user", content: "Hello" }], thinking: off,
});

const tools = [{
  name: "get_weather",
  description: "Weather of a city",
  input_schema: { type: "object",
                  properties: { city: { type: "string", enum: ["Paris", "Lyon"] }, metric: { type: "boolean" } },
                  required: ["city", "metric"] },
}];
const ask = [{ role: "user", content: "Weather in Paris?" }];
const forced = { type: "any", disable_parallel_tool_use: true };
const call = await client.messages.create({
  model, max_tokens: 600, messages: ask, tools, tool_choice: forced, thinking: off, temperature: 0,
});
const use = call.content.find((b) => b.type === "tool_use");
seen.call = { stop: call.stop_reason, name: use?.name, input: use?.input ?? null, id: use?.id ?? null };

const callStream = client.messages.stream({
  model, max_tokens: 600, messages: ask, tools, tool_choice: forced, thinking: off, temperature: 0,
});
const deltas = [];
callStream.on("inputJson", (partial) => deltas.push(partial));
const streamedCall = await callStream.finalMessage();
const streamedUse = streamedCall.content.find((b) => b.type === "tool_use");
seen.stream_call = { stop: streamedCall.stop_reason, name: streamedUse?.name, input: streamedUse?.input ?? null,
                     deltas: deltas.length };

// The round trip: the call and its result go back (a failed one too) and the model answers.
const answer = await client.messages.create({
  model, max_tokens: 4, thinking: off, tools, temperature: 0,
  messages: [...ask, { role: "assistant", content: call.content },
             { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "18 C, sunny" }] }],
});
seen.answer = { stop: answer.stop_reason, tokens: answer.usage.output_tokens };

// Thinking on: the prompt opens the reasoning, which comes back as a thinking block (streamed as thinking_delta).
const thinkEvents = [];
const thinking = client.messages.stream({
  model, max_tokens: 1100, thinking: { type: "enabled", budget_tokens: 1024 }, temperature: 0,
  messages: [{ role: "user", content: "Think about it" }],
});
for await (const e of thinking) if (e.delta?.type) thinkEvents.push(e.delta.type);
const thought = await thinking.finalMessage();
seen.thinking = { blocks: thought.content.map((b) => b.type),
                  chars: thought.content.find((b) => b.type === "thinking")?.thinking.length ?? 0,
                  deltas: thinkEvents.filter((t) => t === "thinking_delta").length };

// Errors come in Anthropic's shape, as the SDK's typed errors.
async function failure(body) {
  try {
    await client.messages.create(body);
    return null;
  } catch (e) {
    return { status: e.status, name: e.constructor.name, type: e.error?.error?.type, message: e.error?.error?.message };
  }
}
seen.image = await failure({ model, max_tokens: 4, messages: [{ role: "user", content: [
  { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }] });
seen.unknown = await failure({ model, max_tokens: 4, messages: ask, mcp_servers: [] });
seen.no_max = await failure({ model, messages: ask });
const wrongKey = new Anthropic({ baseURL: process.env.KESTREL_URL, apiKey: "wrong", maxRetries: 0 });
try {
  await wrongKey.messages.create({ model, max_tokens: 4, messages: ask });
} catch (e) {
  seen.wrong_key = { status: e.status, name: e.constructor.name, type: e.error?.error?.type };
}

console.log(JSON.stringify(seen));
