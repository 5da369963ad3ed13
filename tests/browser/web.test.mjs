// The status page in a real browser (headless Chromium), against a running `campaign-sender web`
// whose database has one campaign sending and one paused. tests/it/web_browser.rs starts all of
// that and runs this file; it exits non-zero on the first broken promise, saying which.
//
//   BASE_URL=http://127.0.0.1:PORT SENDING=spring PAUSED=autumn CHROMIUM=/usr/bin/chromium \
//     [SCREENSHOTS=docs/img] node tests/browser/web.test.mjs
//
// What it holds: both pages load with no console error (a CSP violation is one); the progress
// of the sending campaign moves while the page refreshes itself (no reload); the paused
// campaign shows its banner; an unknown campaign is a 404 page; Tab reaches the campaigns in
// order and Enter opens one; axe-core finds no WCAG 2 A/AA violation (contrast included).
import { createRequire } from "node:module";
import assert from "node:assert/strict";
import { env, launch, step } from "./common.mjs";

const require = createRequire(import.meta.url);
const base = env("BASE_URL");
const sending = env("SENDING");
const paused = env("PAUSED");
const shots = process.env.SCREENSHOTS;

const browser = await launch();

/** A page at 1280×800 whose console errors and uncaught exceptions are collected. */
async function open(context, path) {
  const page = await context.newPage();
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  const res = await page.goto(base + path, { waitUntil: "load" });
  return { page, errors, res };
}

try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });

  // 1. The index: both campaigns, the paused one first (what needs eyes), no console error.
  const index = await open(context, "/");
  assert.equal(index.res.status(), 200);
  const rows = await index.page.locator("#campaigns tbody th a").allTextContents();
  assert.ok(rows.includes(sending) && rows.includes(paused), `campaigns listed: ${rows}`);
  assert.ok(rows.indexOf(paused) < rows.indexOf(sending), `paused first: ${rows}`);
  step("the index lists every campaign, the paused one first");

  // 2. The progress moves between two reads, by the page's own refresh (no reload).
  const settled = () => index.page
    .locator(`tr:has(a[href="/campaigns/${sending}"]) [data-settled]`)
    .getAttribute("data-settled")
    .then(Number);
  await index.page.evaluate(() => { window.__notReloaded = true; });
  const first = await settled();
  let later = first;
  for (let i = 0; i < 60 && later <= first; i++) {
    await index.page.waitForTimeout(500);
    later = await settled();
  }
  assert.ok(later > first, `progress moved: ${first} -> ${later}`);
  assert.equal(await index.page.evaluate(() => window.__notReloaded), true, "no reload");
  step(`the progress moved from ${first} to ${later} without a reload`);

  // 3. Keyboard: the skip link, the home link, then the campaigns in order; Enter opens one.
  await index.page.keyboard.press("Tab");
  assert.equal(await index.page.evaluate(() => document.activeElement.textContent), "Skip to the figures");
  await index.page.keyboard.press("Tab");
  await index.page.keyboard.press("Tab");
  const focused = await index.page.evaluate(() => document.activeElement.getAttribute("href"));
  assert.equal(focused, `/campaigns/${rows[0]}`);
  await Promise.all([index.page.waitForURL(`**/campaigns/${rows[0]}`), index.page.keyboard.press("Enter")]);
  step("Tab reaches the first campaign and Enter opens it");
  if (shots) await shotOf(context, "/", `${shots}/web-index.png`);

  // 4. The paused campaign's page: its banner says who paused it and how to resume.
  const p = await open(context, `/campaigns/${paused}`);
  assert.equal(p.res.status(), 200);
  const banner = await p.page.locator("#banner").textContent();
  assert.match(banner, /Paused by .+ since .+resume --campaign/s);
  step("the paused campaign shows its banner");

  // 5. The sending campaign's page, its charts drawn.
  const c = await open(context, `/campaigns/${sending}`);
  assert.equal(c.res.status(), 200);
  assert.ok(await c.page.locator("svg.chart rect.bar").count() > 0, "charts have bars");
  await c.page.waitForTimeout(2500); // a refresh or two: their errors count too
  if (shots) await c.page.screenshot({ path: `${shots}/web-campaign.png` });
  step("the sending campaign's page draws its charts");

  // 6. An unknown campaign is a 404 page, not an error dump.
  const missing = await open(context, "/campaigns/no-such-campaign");
  assert.equal(missing.res.status(), 404);
  assert.equal(await missing.page.locator("h1").textContent(), "No such campaign");
  step("an unknown campaign is a 404 page");

  for (const [what, o] of [["index", index], ["paused", p], ["campaign", c]]) {
    assert.deepEqual(o.errors, [], `console errors on the ${what} page`);
  }
  step("no console error on any page (CSP violations included)");

  // 7. Accessibility: axe-core over both pages, WCAG 2 A and AA (contrast included). axe is
  // injected as a script, which our CSP rightly forbids: this context alone bypasses it.
  const audit = await browser.newContext({ viewport: { width: 1280, height: 800 }, bypassCSP: true });
  for (const path of ["/", `/campaigns/${sending}`, `/campaigns/${paused}`]) {
    const { page } = await open(audit, path);
    await page.addScriptTag({ path: require.resolve("axe-core/axe.min.js") });
    const result = await page.evaluate(() =>
      window.axe.run(document, { runOnly: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] }));
    const found = result.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.length}× e.g. ${v.nodes[0].html})`);
    assert.deepEqual(found, [], `axe on ${path}`);
  }
  step("axe-core finds no WCAG 2 A/AA violation on any page");
} finally {
  await browser.close();
}

async function shotOf(context, path, file) {
  const { page } = await open(context, path);
  await page.screenshot({ path: file });
  await page.close();
}
