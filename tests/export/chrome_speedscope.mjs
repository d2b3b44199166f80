// chrome_speedscope.mjs - import pyflame's chrome exports into the real
// speedscope (npm package `speedscope`, pinned in package.json) in headless
// Chromium, through its Trace Event Format importer, and report what it
// shows, as JSON on stdout, for consumer_chrome.py to check.
//
// One page serves every file: it opens speedscope the way its command line
// does (#localProfilePath= over file://, no server, no network) and then
// hands it each file with speedscope.loadFileFromBase64(name, data), under
// the name the plan gives (speedscope picks some importers by file name).
// For every file: the console lines (which importer, warnings about slices
// that do not nest), page errors and alerts, the title, the profile list
// (one per thread, with its total), every profile's Sandwich table (total,
// self of every frame), and the profiles as speedscope itself saves them
// (its Export button: "evented" profiles, every frame's open and close time),
// which is what its Time Order view draws. A screenshot per file goes to
// ARTIFACTS.
//
// Usage: node chrome_speedscope.mjs PLAN.json ARTIFACTS CHROMIUM
//   PLAN.json: [{"name": ..., "path": ..., "load_as": ..., "empty": bool}, ...]
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

const [planPath, artifacts, executablePath] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const index = path.join(path.dirname(require.resolve('speedscope/package.json')),
                        'dist/release/index.html');
fs.mkdirSync(artifacts, { recursive: true });
const plan = JSON.parse(fs.readFileSync(planPath, 'utf8'));
const noop = path.join(artifacts, 'speedscope-noop.js');
fs.writeFileSync(noop, '');

const browser = await chromium.launch({
  executablePath,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--no-first-run', '--disable-sync'],
});
const result = {};
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 },
                                             acceptDownloads: true });
  const page = await context.newPage();
  let log = [], errors = [], dialogs = [], requests = [];
  page.on('console', m => log.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', e => errors.push(e.message));
  page.on('dialog', d => { dialogs.push(d.message()); d.dismiss(); });
  page.on('request', r => { if (!r.url().startsWith('file:')) requests.push(r.url()); });
  await page.goto(`file://${index}#localProfilePath=${noop}`);
  await page.waitForFunction(() => window.speedscope && window.speedscope.loadFileFromBase64,
                             null, { timeout: 30000 });
  for (const p of plan) {
    log = []; errors = []; dialogs = []; requests = [];
    const data = fs.readFileSync(p.path).toString('base64');
    await page.evaluate(([n, b]) => window.speedscope.loadFileFromBase64(n, b), [p.load_as, data]);
    const out = { loaded: false };
    try {
      if (p.empty) {
        // speedscope says so in an alert and keeps what it showed.
        for (let i = 0; i < 100 && !dialogs.length; i++) await page.waitForTimeout(100);
      } else {
        await page.waitForFunction(want => document.title === want,
                                   `${p.load_as} - speedscope`, { timeout: 15000, polling: 50 });
        out.loaded = true;
      }
    } catch (e) {
      out.wait = e.message.split('\n')[0];
    }
    if (out.loaded) {
      await page.keyboard.press('1'); // Time Order, for the screenshot
      await page.waitForTimeout(150);
      await page.screenshot({ path: path.join(artifacts, `${p.name}-chrome-speedscope.png`) });
      out.title = await page.title();
      out.list = await page.$$eval('table tr[title]', rows => rows.map(r => ({
        name: r.getAttribute('title'),
        total: r.cells[r.cells.length - 1].textContent.trim(),
      })));
      await page.keyboard.press('3'); // Sandwich
      await page.waitForTimeout(150);
      out.profiles = [];
      for (let i = 0; i < Math.max(out.list.length, 1); i++) {
        const shown = await page.$$eval('span', spans => {
          const s = spans.find(x => x.querySelector('span') && /\(\d+\/\d+\)$/.test(x.textContent.trim()));
          return s ? s.textContent.trim() : null;
        });
        const rows = await page.$$eval('tr', trs => trs
          .filter(tr => tr.cells.length === 3 && tr.cells[0].tagName === 'TD' &&
                        /^[\d.]+\s*(ns|µs|ms|s|min)\b/.test(tr.cells[0].textContent.trim()))
          .map(tr => ({ name: tr.cells[2].textContent.trim(),
                        total: tr.cells[0].textContent.trim(), self: tr.cells[1].textContent.trim() })));
        out.profiles.push({ shown, rows });
        if (i + 1 < out.list.length) {
          await page.keyboard.press('n');
          await page.waitForTimeout(150);
        }
      }
      await page.keyboard.press('1');
      const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 15000 }),
                                      page.getByText(/^\W*Export$/).click()]);
      out.exported = JSON.parse(fs.readFileSync(await dl.path(), 'utf8'));
    }
    Object.assign(out, { log, errors, dialogs, requests });
    result[p.name] = out;
  }
  await context.close();
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(result) + '\n');
