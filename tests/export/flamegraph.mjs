// flamegraph.mjs - open pyflame's svg and html flame graphs in headless
// Chromium (through playwright-core, pinned in package.json) and use them as
// a person would: hover a frame, click it to zoom, reset the zoom, search with
// Ctrl-F (svg: answering the prompt), the Search button, or the page's search
// box (html), Escape to clear. After each step it records what the DOM shows
// (the frames displayed and their widths, the details line, the highlighted
// frames, the matched percentage) and prints it all as JSON on stdout for
// consumer_browser.py to check. Screenshots of the zoomed and searched graphs
// are kept in ARTIFACTS.
//
// Usage: node flamegraph.mjs PLAN.json ARTIFACTS CHROMIUM
//   PLAN.json: [{"name", "path", "kind": "svg"|"html", "zoom": label, "search": [terms]}]
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [planPath, artifacts, executablePath] = process.argv.slice(2);
const plan = JSON.parse(fs.readFileSync(planPath, 'utf8'));
fs.mkdirSync(artifacts, { recursive: true });

// What the flame graph shows now.
function snapshot() {
  const svg = document.querySelector('svg.pyflame');
  const frames = [...svg.querySelectorAll('g.frame')].filter(g => getComputedStyle(g).display !== 'none');
  return {
    shown: frames.map(g => ({
      name: g.getAttribute('data-name'),
      depth: +g.getAttribute('data-depth'),
      n: +g.getAttribute('data-n'),
      x: +g.querySelector('rect').getAttribute('x'),
      width: +g.querySelector('rect').getAttribute('width'),
      text: g.querySelector('text').textContent,
      match: g.classList.contains('match'),
    })),
    total: svg.querySelectorAll('g.frame').length,
    zoom: svg.getAttribute('data-zoom') || '',
    matched: svg.querySelector('.matched').textContent,
    details: svg.querySelector('.details').textContent,
    resetShown: getComputedStyle(svg.querySelector('.reset-zoom')).display !== 'none',
  };
}

// The index among g.frame of the shallowest frame labelled `label`.
function frameIndex(label) {
  const all = [...document.querySelectorAll('svg.pyflame g.frame')];
  let best = -1;
  all.forEach((g, i) => {
    if (g.getAttribute('data-name') === label &&
        (best < 0 || +g.getAttribute('data-depth') < +all[best].getAttribute('data-depth')))
      best = i;
  });
  return best;
}

const browser = await chromium.launch({
  executablePath,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--no-first-run', '--disable-sync'],
});
const result = {};
try {
  for (const p of plan) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const errors = [], requests = [];
    page.on('pageerror', e => errors.push(e.message));
    page.on('request', r => { if (!r.url().startsWith('file:')) requests.push(r.url()); });
    let answer = null;
    page.on('dialog', async d => {
      if (d.type() === 'prompt' && answer !== null) await d.accept(answer);
      else { errors.push(`unexpected ${d.type()}: ${d.message()}`); await d.dismiss(); }
      answer = null;
    });
    await page.goto('file://' + p.path);
    await page.waitForSelector('svg.pyflame g.frame', { timeout: 20000 });
    const steps = {};
    steps.initial = await page.evaluate(snapshot);

    const idx = await page.evaluate(frameIndex, p.zoom);
    const target = page.locator('svg.pyflame g.frame').nth(idx);
    await target.hover();
    steps.hover = await page.evaluate(snapshot);
    await target.click();
    steps.zoomed = await page.evaluate(snapshot);
    await page.screenshot({ path: path.join(artifacts, `${p.name}-zoomed.png`), fullPage: p.kind === 'html' });
    await page.locator('svg.pyflame .reset-zoom').click();
    steps.reset = await page.evaluate(snapshot);

    steps.search = [];
    for (const [i, term] of p.search.entries()) {
      if (p.kind === 'html') {
        await page.fill('#search', term);
      } else if (i % 2 === 0) {
        answer = term;
        await page.keyboard.press('Control+f');
      } else {
        answer = term;
        await page.locator('svg.pyflame .search-button').click();
      }
      await page.waitForTimeout(100);
      steps.search.push({ term, ...(await page.evaluate(snapshot)) });
    }
    await page.screenshot({ path: path.join(artifacts, `${p.name}-search.png`), fullPage: p.kind === 'html' });
    if (p.kind === 'html') await page.fill('#search', '');
    else await page.keyboard.press('Escape');
    steps.cleared = await page.evaluate(snapshot);
    result[p.name] = { steps, errors, requests };
    await context.close();
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(result) + '\n');
