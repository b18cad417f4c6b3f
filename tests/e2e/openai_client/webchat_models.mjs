// The web chat page (GET /) against a server with several models (tests/e2e/test_server_models.cpp), in Debian's
// chromium through puppeteer-core: the page lists the models in its picker, and a message goes to the one chosen
// (which the server then loads). Prints one JSON line of what it saw. Environment: KESTREL_URL (the page).
import { openBrowser } from "./browser.mjs";

const browser = await openBrowser();
const seen = { console_errors: [] };
try {
  const page = await browser.newPage();
  page.on("console", (m) => { if (m.type() === "error") seen.console_errors.push(m.text()); });
  const bodies = [];
  page.on("request", (r) => { if (r.method() === "POST") bodies.push(JSON.parse(r.postData())); });
  await page.goto(process.env.KESTREL_URL, { waitUntil: "load" });
  await page.waitForFunction(() => !document.getElementById("model-label").hidden, { timeout: 20000 });
  seen.options = await page.evaluate(() => [...document.querySelectorAll("#model option")].map((o) => o.value));
  await page.select("#model", "b");
  await page.evaluate(() => { document.getElementById("max_tokens").value = "6"; });
  await page.type("#input", "Hello");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => !document.getElementById("send").disabled &&
                             document.querySelector("#messages .msg.assistant:last-child"), { timeout: 60000 });
  seen.reply_class = await page.evaluate(() => document.querySelector("#messages .msg:last-child").className);
  seen.asked = bodies.map((b) => b.model);
} finally {
  await browser.closeAll();
}
console.log(JSON.stringify(seen));
