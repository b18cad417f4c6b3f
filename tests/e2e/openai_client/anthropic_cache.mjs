// Prompt caching through the official Anthropic client (npm `@anthropic-ai/sdk`), as Claude Code uses it: a
// long system prompt and the conversation's last user block marked with cache_control, sent twice and then one
// turn longer; whole and streamed. Prints one JSON line of the usage each answer reported
// (tests/e2e/test_server_apis.cpp). Environment: KESTREL_URL, KESTREL_KEY.
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.env.KESTREL_URL, apiKey: process.env.KESTREL_KEY, maxRetries: 0 });
const model = "tiny";
const off = { type: "disabled" };
const words = "the cat sat on a warm mat while the dog slept under an old green tree near the house ";
const system = [{ type: "text", text: "You are a careful assistant. " + words.repeat(40),
                  cache_control: { type: "ephemeral", ttl: "1h" } }];
const turn1 = [{ role: "user", content: [{ type: "text", text: "Tell me about the cat.", cache_control: { type: "ephemeral" } }] }];
const ask = (messages) => ({ model, max_tokens: 4, system, messages, thinking: off, temperature: 0 });
const usage = (u) => ({ input_tokens: u.input_tokens, cache_creation_input_tokens: u.cache_creation_input_tokens,
                        cache_read_input_tokens: u.cache_read_input_tokens, output_tokens: u.output_tokens });
const seen = {};
const first = await client.messages.create(ask(turn1));
seen.first = usage(first.usage);
const second = await client.messages.create(ask(turn1));
seen.second = usage(second.usage);
const stream = client.messages.stream(ask(turn1));
seen.streamed = usage((await stream.finalMessage()).usage);
const reply = first.content.find((b) => b.type === "text")?.text ?? "";
const turn2 = [{ role: "user", content: [{ type: "text", text: "Tell me about the cat." }] },
               { role: "assistant", content: reply || "ok" },
               { role: "user", content: [{ type: "text", text: "And the dog?", cache_control: { type: "ephemeral" } }] }];
seen.next_turn = usage((await client.messages.create(ask(turn2))).usage);
seen.count = (await client.messages.countTokens({ model, system, messages: turn1, thinking: off })).input_tokens;
try {
  await client.messages.create({ ...ask(turn1), system: [{ ...system[0], cache_control: { type: "ephemeral", ttl: "2h" } }] });
  seen.bad_ttl = "accepted";
} catch (e) {
  seen.bad_ttl = { status: e.status, message: e.error?.error?.message ?? String(e) };
}
console.log(JSON.stringify(seen));
