// chrome_devtools.mjs - parse pyflame's chrome exports with the trace engine
// of the Chrome DevTools Performance panel (npm package
// @paulirish/trace_engine, pinned in package.json: DevTools' own
// models/trace, published for Lighthouse) and report what it made of them,
// as JSON on stdout, for consumer_chrome.py to check.
//
// For every file: the engine's processes and threads (with the names it took
// from the metadata events), each thread's tree of slices as the engine
// nests them (TreeHelpers.treify: a slice that does not fit in its parent is
// left out of the tree), how many slices the thread has, the engine's trace
// bounds and warnings, or the error that stopped it.
//
// Usage: node chrome_devtools.mjs PLAN.json
//   PLAN.json: [{"name": ..., "path": ...}, ...]
import fs from 'node:fs';
import * as Trace from '@paulirish/trace_engine';
// The engine expects a browser's DOMRect; the package ships this polyfill.
import { polyfillDOMRect } from '@paulirish/trace_engine/analyze-trace.mjs';

polyfillDOMRect();
const plan = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

function node(n) {
  const e = n.entry;
  return { name: e.name, ts: e.ts, dur: e.dur ?? 0, self: n.selfTime ?? null,
           children: n.children.map(node) };
}

function count(nodes) {
  return nodes.reduce((k, n) => k + 1 + count(n.children), 0);
}

const result = {};
for (const p of plan) {
  const out = { error: null };
  try {
    const doc = JSON.parse(fs.readFileSync(p.path, 'utf8'));
    const model = Trace.TraceModel.Model.createWithAllHandlers();
    await model.parse(Array.isArray(doc) ? doc : doc.traceEvents);
    const data = model.parsedTrace().data;
    const meta = data.Meta;
    out.generic = meta.traceIsGeneric;
    out.bounds = { min: meta.traceBounds.min, max: meta.traceBounds.max };
    out.processNames = Object.fromEntries([...meta.processNames].map(([pid, e]) => [pid, e.args?.name ?? null]));
    out.warnings = [...data.Warnings.perWarning.keys()];
    out.processes = [];
    for (const [pid, proc] of data.Renderer.processes) {
      const threads = [];
      for (const [tid, t] of proc.threads) {
        const roots = t.tree ? [...t.tree.roots].map(node) : [];
        threads.push({ tid, name: t.name ?? null, entries: t.entries.length,
                       inTree: count(roots), roots });
      }
      out.processes.push({ pid, threads });
    }
  } catch (e) {
    out.error = String(e && e.stack || e);
  }
  result[p.name] = out;
}
process.stdout.write(JSON.stringify(result) + '\n');
