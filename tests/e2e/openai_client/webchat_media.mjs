// The web chat page's image attachment in a real browser (Debian's chromium driven by puppeteer-core), against a
// server with an mmproj (tests/e2e/test_server_media.cpp): an image attached through the file input, a question
// sent, the reply streamed in; the image shown in the user's message and sent as an image_url part (the server's
// media metrics count it). With KESTREL_AUDIO: an image and an audio file in one message (a player shown, an
// input_audio part sent). Prints one JSON line of what it saw. Environment: KESTREL_URL (the page), KESTREL_IMAGE,
// KESTREL_AUDIO.
import { openBrowser } from "./browser.mjs";

const browser = await openBrowser();
const seen = { console_errors: [] };
try {
  const page = await browser.newPage();
  page.on("console", (m) => { if (m.type() === "error") seen.console_errors.push(m.text()); });
  let body = null;
  page.on("request", (r) => { if (r.url().endsWith("/v1/chat/completions")) body = JSON.parse(r.postData()); });
  await page.goto(process.env.KESTREL_URL, { waitUntil: "load" });
  await page.evaluate(() => { document.getElementById("max_tokens").value = "6"; });
  const input = await page.$("#attach");
  if (process.env.KESTREL_AUDIO) {
    // An image and an audio file attached together, one message: the player shown, the parts sent in order.
    await input.uploadFile(process.env.KESTREL_IMAGE, process.env.KESTREL_AUDIO);
    await page.waitForFunction(() => document.getElementById("attached").textContent !== "", { timeout: 10000 });
    seen.attached = await page.evaluate(() => document.getElementById("attached").textContent);
    await page.type("#input", "What do you see and hear?");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => !document.getElementById("send").disabled &&
                                     document.querySelectorAll("#messages .msg").length >= 2, { timeout: 60000 });
    seen.messages = await page.evaluate(() => [...document.querySelectorAll("#messages .msg")].map((m) => ({
      cls: m.className, images: m.querySelectorAll("img.attached").length, audio: m.querySelectorAll("audio.attached").length,
      audio_src: m.querySelector("audio.attached")?.src?.slice(0, 22) ?? "",
      content: m.querySelector(".content")?.textContent ?? "" })));
    const parts = body?.messages?.at(-1)?.content;
    seen.sent_parts = Array.isArray(parts) ? parts.map((p) => p.type) : typeof parts;
    seen.sent_audio = Array.isArray(parts) ? parts.find((p) => p.type === "input_audio")?.input_audio ?? null : null;
    if (seen.sent_audio) seen.sent_audio = { format: seen.sent_audio.format, data_prefix: seen.sent_audio.data.slice(0, 5) };
    seen.metrics = await page.evaluate(async () => (await (await fetch("metrics")).text())
      .split("\n").filter((l) => l.startsWith("kestrel_media_images_total")).join("\n"));
    // Reloaded: the conversation (its audio with it) comes back from the browser's storage.
    await page.reload({ waitUntil: "load" });
    seen.reloaded_audio = await page.evaluate(() => document.querySelectorAll("#messages audio.attached").length);
    await browser.closeAll();
    console.log(JSON.stringify(seen));
    process.exit(0);
  }
  // The image attached, the text typed and sent; back when the reply (the conversation's `messages`-th) is in.
  const send = async (text, messages) => {
    await input.uploadFile(process.env.KESTREL_IMAGE);
    await page.waitForFunction(() => document.getElementById("attached").textContent === "1 image", { timeout: 10000 });
    await page.type("#input", text);
    await page.keyboard.press("Enter");
    await page.waitForFunction((n) => !document.getElementById("send").disabled &&
                                      document.querySelectorAll("#messages .msg").length >= n, { timeout: 60000 }, messages);
  };
  await send("What is in this picture?", 2);
  seen.messages = await page.evaluate(() => [...document.querySelectorAll("#messages .msg")].map((m) => ({
    cls: m.className, images: m.querySelectorAll("img.attached").length,
    content: m.querySelector(".content")?.textContent ?? "" })));
  seen.attached_after = await page.evaluate(() => document.getElementById("attached").textContent);
  const parts = body?.messages?.at(-1)?.content;
  seen.sent_parts = Array.isArray(parts) ? parts.map((p) => p.type) : typeof parts;
  seen.sent_url_prefix = Array.isArray(parts) ? parts[0]?.image_url?.url?.slice(0, 22) : "";
  seen.metrics = await page.evaluate(async () => (await (await fetch("metrics")).text())
    .split("\n").filter((l) => l.startsWith("kestrel_media_images_total")).join("\n"));
  // The browser's storage full (other data of the page's origin): the next message with an image is still sent
  // and answered; the conversation is kept without its images where they do not fit.
  seen.filled = await page.evaluate(() => {
    let n = 0;
    for (const size of [256 * 1024, 1024, 1]) {  // to the last byte
      const chunk = "x".repeat(size);
      try { for (;; n++) localStorage.setItem("filler" + n, chunk); } catch {}
    }
    return n;
  });
  await send("And now?", 4);
  seen.full_storage = await page.evaluate(() => [...document.querySelectorAll("#messages .msg")].slice(2).map((m) => ({
    cls: m.className, images: m.querySelectorAll("img.attached").length })));
} finally {
  await browser.closeAll();
}
console.log(JSON.stringify(seen));
