// The Vercel AI SDK (npm `ai` with `@ai-sdk/openai-compatible`) against a Kestrel server: generateText (chat and
// completion models), streamText (text and usage), a forced tool call whole and streamed, and generateObject with
// a JSON schema. Prints one JSON line of what it saw; tests/clients/ai_sdk_test.py holds it to the server's own
// answers. Environment: KESTREL_URL (…/v1), KESTREL_MODEL.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, jsonSchema, streamText, tool } from "ai";

const provider = createOpenAICompatible({
  name: "kestrel", baseURL: process.env.KESTREL_URL, apiKey: "none", includeUsage: true,
  supportsStructuredOutputs: true,
});
const model = provider.chatModel(process.env.KESTREL_MODEL);
const seen = {};
const attempt = async (key, fn) => {
  try {
    seen[key] = await fn();
  } catch (e) {
    seen[key] = { error: `${e.name}: ${e.message}`, status: e.statusCode ?? null, body: e.responseBody ?? null };
  }
};
const prompt = "Once upon a time";

await attempt("text", async () => {
  const r = await generateText({ model, prompt, maxOutputTokens: 12, temperature: 0, maxRetries: 0 });
  return { text: r.text, finish: r.finishReason, input: r.usage.inputTokens, output: r.usage.outputTokens };
});
await attempt("completion", async () => {
  const r = await generateText({ model: provider.completionModel(process.env.KESTREL_MODEL), prompt,
                                 maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
  return { text: r.text, finish: r.finishReason };
});
await attempt("stream", async () => {
  const s = streamText({ model, prompt, maxOutputTokens: 12, temperature: 0, maxRetries: 0 });
  let text = "", parts = 0;
  for await (const d of s.textStream) { text += d; parts++; }
  const usage = await s.usage;
  return { text, parts, finish: await s.finishReason, output: usage.outputTokens };
});
const tools = {
  get_weather: tool({
    description: "Weather of a city",
    inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string", enum: ["Paris", "Lyon"] } },
                              required: ["city"], additionalProperties: false }),
  }),
};
await attempt("tool", async () => {
  const r = await generateText({ model, prompt: "Weather in Paris?", tools, toolChoice: "required",
                                 maxOutputTokens: 300, temperature: 0, maxRetries: 0,
                                 providerOptions: { kestrel: { parallel_tool_calls: false } } });
  return { calls: r.toolCalls.map((c) => ({ name: c.toolName, input: c.input })), finish: r.finishReason };
});
await attempt("tool_stream", async () => {
  const s = streamText({ model, prompt: "Weather in Paris?", tools, toolChoice: "required", maxOutputTokens: 300,
                         temperature: 0, maxRetries: 0, providerOptions: { kestrel: { parallel_tool_calls: false } } });
  const calls = [];
  let deltas = 0;
  for await (const part of s.fullStream) {
    if (part.type === "tool-call") calls.push({ name: part.toolName, input: part.input });
    if (part.type === "tool-input-delta") deltas++;
    if (part.type === "error") throw part.error;
  }
  return { calls, deltas };
});
await attempt("object", async () => {
  const r = await generateObject({
    model, prompt: "Who is the hero?", maxOutputTokens: 200, temperature: 0, maxRetries: 0,
    schema: jsonSchema({ type: "object", properties: { name: { type: "string", enum: ["Lily", "Tom"] },
                                                       age: { type: "integer", enum: [3, 4, 5] } },
                         required: ["name", "age"], additionalProperties: false }),
  });
  return { object: r.object, finish: r.finishReason };
});
await attempt("refused", async () => {
  const r = await generateText({ model, prompt, maxOutputTokens: 4, topP: 5, maxRetries: 0 });
  return { text: r.text };
});
console.log(JSON.stringify(seen));
