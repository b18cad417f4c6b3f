// The web chat page (GET /) in a real browser: Debian's chromium driven by puppeteer-core
// (tests/e2e/test_server_apis.cpp). Types a message and watches the reply stream in (reasoning shown apart),
// answers the API-key prompt, stops a long reply, regenerates, reloads and finds the conversation again,
// renders markdown and code blocks, and saves a screenshot. Prints one JSON line of what it saw.
// Environment: KESTREL_URL (the page), KESTREL_KEY, KESTREL_SCREENSHOT (where the screenshot goes).
import { openBrowser } from "./browser.mjs";

// (acceptInsecureCerts: the test's self-signed certificate; the page is served over TLS)
const browser = await openBrowser({ acceptInsecureCerts: true });
const seen = { dialogs: [], console_errors: [] };
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 800 });
  page.on("dialog", async (d) => {  // the page asks for the API key on a 401
    seen.dialogs.push(d.message());
    await d.accept(process.env.KESTREL_KEY);
  });
  page.on("console", (m) => { if (m.type() === "error") seen.console_errors.push(m.text()); });
  const requests = [];
  page.on("request", (r) => requests.push(new URL(r.url()).host));
  await page.goto(process.env.KESTREL_URL, { waitUntil: "load" });
  seen.title = await page.title();

  const idle = () => page.waitForFunction(() => !document.getElementById("send").disabled, { timeout: 60000 });
  const last = () => page.evaluate(() => {
    const msgs = [...document.querySelectorAll("#messages .msg")];
    const m = msgs[msgs.length - 1];
    return m ? { cls: m.className, content: m.querySelector(".content")?.textContent ?? "",
                 reasoning: m.querySelector(".reasoning-text")?.textContent ?? "",
                 collapsible: !!m.querySelector("details.reasoning summary") } : null;
  });

  // A message: the reply streams in (the reasoning grows over several updates).
  await page.evaluate(() => {
    document.getElementById("max_tokens").value = "40";
    window.__updates = new Set();
    new MutationObserver(() => {
      const r = document.querySelector("#messages .msg.assistant:last-child .reasoning-text, #messages .msg.assistant:last-child .content");
      if (r) window.__updates.add(r.textContent.length);
    }).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true });
  });
  await page.type("#input", "Tell me a story");
  await page.keyboard.press("Enter");
  await idle();
  seen.first = await last();
  seen.updates = await page.evaluate(() => window.__updates.size);
  seen.count_after_first = await page.evaluate(() => document.querySelectorAll("#messages .msg").length);

  // Stop: a long reply is cut short and the page is ready again.
  await page.evaluate(() => { document.getElementById("max_tokens").value = "3000"; });
  await page.type("#input", "And another, a long one");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => {
    const m = document.querySelector("#messages .msg.assistant:last-child");
    return m && (m.querySelector(".reasoning-text")?.textContent.length || m.querySelector(".content").textContent.length);
  }, { timeout: 60000 });
  const startedStop = Date.now();
  await page.click("#stop");
  await idle();
  seen.stop = { ms: Date.now() - startedStop, status: await page.$eval("#status", (e) => e.textContent), last: await last() };

  // Regenerate: the last reply is replaced, not added to.
  await page.evaluate(() => { document.getElementById("max_tokens").value = "20"; });
  const before = await page.evaluate(() => document.querySelectorAll("#messages .msg").length);
  await page.click("#regenerate");
  await idle();
  seen.regenerate = { before, after: await page.evaluate(() => document.querySelectorAll("#messages .msg").length) };

  // Reload: the conversation is in localStorage.
  await page.reload({ waitUntil: "load" });
  seen.reload = await page.evaluate(() => ({
    titles: [...document.querySelectorAll("#conversations li")].map((li) => li.firstChild.textContent),
    messages: document.querySelectorAll("#messages .msg").length,
    first_user: document.querySelector("#messages .msg.user .content")?.textContent,
  }));

  // Markdown: a stored reply with code renders as code, bold and a list.
  await page.evaluate(() => {
    const list = JSON.parse(localStorage.getItem("kestrel.conversations"));
    list.unshift({ id: "md", title: "Markdown", messages: [
      { role: "user", content: "Show code" },
      { role: "assistant", content: "Here is **bold** and `inline`:\n\n```python\nprint('<hi>')\n```\n\n- one\n- two" }] });
    localStorage.setItem("kestrel.conversations", JSON.stringify(list));
    localStorage.setItem("kestrel.current", "md");
  });
  await page.reload({ waitUntil: "load" });
  seen.markdown = await page.evaluate(() => ({
    code: document.querySelector("#messages pre code.language-python")?.textContent,
    bold: document.querySelector("#messages strong")?.textContent,
    items: document.querySelectorAll("#messages li").length,
  }));
  await page.evaluate(() => { localStorage.setItem("kestrel.current", JSON.parse(localStorage.getItem("kestrel.conversations"))[1].id); });
  await page.reload({ waitUntil: "load" });
  await page.screenshot({ path: process.env.KESTREL_SCREENSHOT });
  seen.hosts = [...new Set(requests)];
} finally {
  await browser.closeAll();
}
console.log(JSON.stringify(seen));
