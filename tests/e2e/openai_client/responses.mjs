// The official OpenAI client's Responses API (responses.create / responses.stream) against a Kestrel server
// running a tiny reasoning model with a tool-call format (tests/e2e/test_server_apis.cpp): a response, a
// streamed one, a tool round trip continued by previous_response_id, structured output, reasoning items, and
// the store's limits. Prints one JSON line of what it saw. Environment: KESTREL_URL (…/v1).
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.KESTREL_URL, apiKey: "none", maxRetries: 0 });
const model = "tiny";
const seen = {};

const first = await client.responses.create({
  model, input: "Hello", instructions: "Be brief.", max_output_tokens: 6, temperature: 0,
});
seen.first = { object: first.object, status: first.status, types: first.output.map((o) => o.type),
               reasoning: first.output.find((o) => o.type === "reasoning")?.content?.[0]?.text ?? "",
               usage: first.usage, incomplete: first.incomplete_details };

// Streamed: the SDK's event reader and its final response.
const events = [];
const stream = client.responses.stream({ model, input: "Hello", instructions: "Be brief.", max_output_tokens: 6, temperature: 0 });
for await (const e of stream) events.push(e.type);
const streamedFinal = await stream.finalResponse();
seen.stream = { events, status: streamedFinal.status,
                reasoning: streamedFinal.output.find((o) => o.type === "reasoning")?.content?.[0]?.text ?? "" };

// A conversation continued by id: the second request holds only the new turn.
const a = await client.responses.create({ model, input: "My name is Ada.", max_output_tokens: 4, temperature: 0 });
const b = await client.responses.create({ model, input: "What is my name?", previous_response_id: a.id,
                                          max_output_tokens: 4, temperature: 0 });
seen.continued = { input_tokens: b.usage.input_tokens, first_input_tokens: a.usage.input_tokens,
                   cached: b.usage.input_tokens_details.cached_tokens, previous: b.previous_response_id };
seen.retrieved = (await client.responses.retrieve(a.id)).id;

// Tools: a forced call as a function_call item, its output sent back by previous_response_id.
const tools = [{ type: "function", name: "get_weather", description: "Weather of a city", strict: true,
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Lyon"] } }, required: ["city"],
                additionalProperties: false } }];
// Qwen3.5 opens its reasoning in the prompt unless told not to, and a forced call must start the reply:
// reasoning effort "none" is the template's thinking switch turned off.
const noThink = { reasoning: { effort: "none" } };
const forced = await client.responses.create({
  model, input: [{ role: "user", content: [{ type: "input_text", text: "Weather in Paris?" }] }], tools,
  tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 300, temperature: 0, ...noThink,
  metadata: { test: "tools" },
});
const fc = forced.output.find((o) => o.type === "function_call");
seen.call = { status: forced.status, metadata: forced.metadata, name: fc?.name, args: fc ? JSON.parse(fc.arguments) : null, call_id: fc?.call_id ?? null };
const callEvents = [];
const callStream = client.responses.stream({
  model, input: "Weather in Paris?", tools, tool_choice: "required", parallel_tool_calls: false,
  max_output_tokens: 300, temperature: 0, ...noThink,
});
let streamedArgs = "";
for await (const e of callStream) {
  callEvents.push(e.type);
  if (e.type === "response.function_call_arguments.delta") streamedArgs += e.delta;
}
seen.stream_call = { args: streamedArgs ? JSON.parse(streamedArgs) : null,
                     added: callEvents.includes("response.output_item.added"),
                     done: callEvents.includes("response.function_call_arguments.done") };
const answer = await client.responses.create({
  // (strict only where a call is forced: replies under "auto" are not held to a grammar)
  model, previous_response_id: forced.id, max_output_tokens: 4, temperature: 0,
  tools: tools.map(({ strict, ...t }) => t),
  input: [{ type: "function_call_output", call_id: fc.call_id, output: "18 C, sunny" }],
});
seen.answer = { status: answer.status, output_tokens: answer.usage.output_tokens };

// Structured output through text.format.
const structured = await client.responses.create({
  model, input: "Weather?", max_output_tokens: 200, temperature: 0, ...noThink,
  text: { format: { type: "json_schema", name: "weather", strict: true,
                    schema: { type: "object", properties: { raining: { type: "boolean" } }, required: ["raining"],
                              additionalProperties: false } } },
});
seen.structured = { text: structured.output_text };

// store: false keeps nothing; an unknown id is a 404 naming it.
const unstored = await client.responses.create({ model, input: "Hi", max_output_tokens: 2, store: false });
try {
  await client.responses.create({ model, input: "Again", previous_response_id: unstored.id, max_output_tokens: 2 });
  seen.unstored = null;
} catch (e) {
  seen.unstored = { status: e.status, message: e.message };
}
try {
  await client.responses.create({ model, input: "Hi", tools: [{ type: "web_search" }] });
  seen.builtin = null;
} catch (e) {
  seen.builtin = { status: e.status, param: e.param, message: e.message };
}

console.log(JSON.stringify(seen));
