// The pages a recipient sees when they leave, in a real browser (headless Chromium), against a
// running `campaign-sender events`. tests/it/web_browser.rs starts it over real PostgreSQL and
// runs this file; it exits non-zero on the first broken promise, saying which.
//
//   BASE_URL=http://127.0.0.1:PORT TOKEN_JA=… TOKEN_EN=… SENDER=News CHROMIUM=/usr/bin/chromium \
//     [SCREENSHOTS=docs/img] node tests/browser/unsubscribe.test.mjs
//
// What it holds, on a phone's screen (390×844) for a reader of Japanese and one of English: the
// link's page is in the reader's language (`lang`, the title), names the sender and no address,
// is styled by its own stylesheet with no console error (a CSP violation is one) and no
// sideways scrolling; its button, by keyboard, unsubscribes and the result page holds the same;
// a forged link names no sender; axe-core finds no WCAG 2 A/AA violation on any of them.
import { createRequire } from "node:module";
import assert from "node:assert/strict";
import { env, launch, step } from "./common.mjs";

const require = createRequire(import.meta.url);
const base = env("BASE_URL");
const sender = env("SENDER");
const shots = process.env.SCREENSHOTS;
const readers = [
  { lang: "ja", accept: "ja-JP,ja;q=0.9,en;q=0.5", token: env("TOKEN_JA"),
    confirm: "配信停止", done: "配信を停止しました", invalid: "このリンクは無効です" },
  { lang: "en", accept: "en-GB,en;q=0.9", token: env("TOKEN_EN"),
    confirm: "Unsubscribe", done: "You are unsubscribed", invalid: "This link is not valid" },
];

const browser = await launch();
const phone = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };

/** What a page shows, and what went wrong on it. */
async function look(page, errors, reader, title, named) {
  assert.equal(await page.getAttribute("html", "lang"), reader.lang, `${title}: lang`);
  assert.equal((await page.locator("h1").textContent()).trim(), title);
  const text = await page.locator("body").innerText();
  assert.ok(!text.includes("@"), `${title}: an address on the page: ${text}`);
  assert.equal(text.includes(sender), named, `${title}: names the sender ${named}: ${text}`);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `${title}: ${overflow}px of sideways scrolling on a phone`);
  const styled = await page.evaluate(() => getComputedStyle(document.querySelector("main")).maxWidth);
  assert.notEqual(styled, "none", `${title}: the stylesheet was not applied`);
  assert.deepEqual(errors, [], `${title}: console errors`);
}

/** axe-core over `url` as `reader` reads it (its CSP bypassed in this context only: axe is an
 * injected script, which the pages' CSP rightly refuses). */
async function audit(url, reader, method) {
  const context = await browser.newContext({ ...phone, bypassCSP: true,
    extraHTTPHeaders: { "Accept-Language": reader.accept } });
  const page = await context.newPage();
  if (method === "POST") {
    await page.goto(`${base}/unsubscribe/${reader.token}`);
    await Promise.all([page.waitForNavigation(), page.locator("button").click()]);
  } else {
    await page.goto(url);
  }
  await page.addScriptTag({ path: require.resolve("axe-core/axe.min.js") });
  const result = await page.evaluate(() =>
    window.axe.run(document, { runOnly: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] }));
  const found = result.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.length}× e.g. ${v.nodes[0].html})`);
  assert.deepEqual(found, [], `axe on ${url} (${reader.lang}, ${method})`);
  await context.close();
}

try {
  for (const reader of readers) {
    const context = await browser.newContext({ ...phone, locale: reader.lang,
      extraHTTPHeaders: { "Accept-Language": reader.accept } });
    const page = await context.newPage();
    const errors = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));

    const url = `${base}/unsubscribe/${reader.token}`;
    const res = await page.goto(url, { waitUntil: "load" });
    assert.equal(res.status(), 200);
    assert.equal(res.headers()["content-language"], reader.lang);
    await look(page, errors, reader, reader.confirm, true);
    if (shots) await page.screenshot({ path: `${shots}/unsubscribe-${reader.lang}.png` });
    step(`${reader.lang}: the link's page is in the reader's language and names ${sender}, no address`);

    // The button by keyboard: focus it, Enter posts the one click.
    await page.locator("button").focus();
    await Promise.all([page.waitForNavigation(), page.keyboard.press("Enter")]);
    await look(page, errors, reader, reader.done, true);
    if (shots) await page.screenshot({ path: `${shots}/unsubscribe-${reader.lang}-done.png` });
    step(`${reader.lang}: Enter on the button unsubscribes; the result names ${sender}, no address`);

    const forged = await page.goto(`${base}/unsubscribe/${reader.token.slice(0, -4)}AAAA`);
    assert.equal(forged.status(), 404);
    // Chromium reports the document's own 404 on the console; anything else is an error.
    const rest = errors.filter((e) => !/status of 404/.test(e));
    await look(page, rest, reader, reader.invalid, false);
    step(`${reader.lang}: a forged link says so and names no sender`);
    await context.close();

    await audit(url, reader, "GET");
    await audit(url, reader, "POST");
    await audit(`${base}/unsubscribe/${reader.token.slice(0, -4)}AAAA`, reader, "GET");
    step(`${reader.lang}: axe-core finds no WCAG 2 A/AA violation on the three pages`);
  }
} finally {
  await browser.close();
}
