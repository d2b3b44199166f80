// speedscope.mjs - load pyflame's speedscope exports into the real speedscope
// (npm package `speedscope`, pinned in package.json) in headless Chromium and
// report what it shows, as JSON on stdout, for consumer_browser.py to check.
//
// Each file is loaded the way speedscope's own command line does it: a script
// calling speedscope.loadFileFromBase64(name, data), named in the page's
// #localProfilePath= hash, over file:// (no server, no network). For every
// profile (thread) it reads the profile list (name, total weight) and the
// Sandwich view's table (total, self and file of every frame), moving to the
// next profile with speedscope's `n` key. A screenshot of each file's first
// profile is kept in ARTIFACTS.
//
// Usage: node speedscope.mjs WORKDIR ARTIFACTS CHROMIUM
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

const [workdir, artifacts, executablePath] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const index = path.join(path.dirname(require.resolve('speedscope/package.json')),
                        'dist/release/index.html');
fs.mkdirSync(artifacts, { recursive: true });
const cases = JSON.parse(fs.readFileSync(path.join(workdir, 'cases.json'), 'utf8'))
  .filter(c => c.format === 'speedscope');

const browser = await chromium.launch({
  executablePath,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--no-first-run', '--disable-sync'],
});
const result = {};
try {
  for (const c of cases) {
    const file = path.join(workdir, c.file);
    const loader = path.join(workdir, `${c.name}.speedscope-load.js`);
    fs.writeFileSync(loader, `speedscope.loadFileFromBase64(${JSON.stringify(c.file)}, ` +
                     `${JSON.stringify(fs.readFileSync(file).toString('base64'))})`);
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', e => errors.push(e.message));
    page.on('dialog', d => { errors.push(`dialog: ${d.message()}`); d.dismiss(); });
    await page.goto(`file://${index}#localProfilePath=${loader}`);
    // The toolbar names the profile once the file is imported.
    await page.waitForFunction(() => document.title.endsWith(' - speedscope'), null,
                               { timeout: 30000 });
    await page.waitForTimeout(500);
    await page.screenshot({ path: path.join(artifacts, `${c.name}-speedscope.png`) });
    const title = await page.title();
    // The profile selector's table: one row per profile with its total weight.
    const list = await page.$$eval('table tr[title]', rows => rows.map(r => ({
      name: r.getAttribute('title'),
      total: r.cells[r.cells.length - 1].textContent.trim(),
    })));
    await page.keyboard.press('3'); // the Sandwich view
    await page.waitForTimeout(300);
    const profiles = [];
    const n = Math.max(list.length, 1);
    for (let i = 0; i < n; i++) {
      const shown = await page.$$eval('span', spans => {
        const s = spans.find(x => x.querySelector('span') && /\(\d+\/\d+\)$/.test(x.textContent.trim()));
        return s ? s.textContent.trim() : null;
      });
      // The Sandwich table: rows of three cells (total, self, symbol name with its file as title).
      const rows = await page.$$eval('tr', trs => trs
        .filter(tr => tr.cells.length === 3 && tr.cells[0].tagName === 'TD' &&
                      /^[\d.]+\s*(ns|µs|ms|s|min)\b/.test(tr.cells[0].textContent.trim()))
        .map(tr => ({ name: tr.cells[2].textContent.trim(),
                      file: tr.cells[2].getAttribute('title') || '',
                      total: tr.cells[0].textContent.trim(), self: tr.cells[1].textContent.trim() })));
      profiles.push({ shown, rows });
      if (i + 1 < n) {
        await page.keyboard.press('n');
        await page.waitForTimeout(300);
      }
    }
    result[c.name] = { title, list, profiles, errors };
    await context.close();
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(result, null, 1) + '\n');
