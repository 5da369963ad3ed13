// What the browser tests share: a required environment variable, headless Chromium launched as
// the machine has it (Debian's /usr/bin/chromium, `CHROMIUM` overrides), and the "ok:" line each
// promise kept prints (tests/it/web_browser.rs reads them).
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

export const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} must be set`);
  return v;
};

export const launch = () => chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});

export const step = (what) => console.log(`ok: ${what}`);
