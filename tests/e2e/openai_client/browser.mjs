// Debian's chromium through puppeteer-core for the web page's tests (webchat*.mjs): headless, a profile of its own
// (removed by close()), and no connection anywhere but the server (the machine's network is closed: no background
// connections, no GPU). `options` adds to puppeteer's launch options.
import puppeteer from "puppeteer-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export async function openBrowser(options = {}) {
  const profile = mkdtempSync(join(tmpdir(), "kestrel-chromium-"));
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    userDataDir: profile,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
    ...options,
  });
  browser.closeAll = async () => {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return browser;
}
