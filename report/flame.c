/*
 * flame.c - the flame graph shared by the svg and html exports: an SVG of
 * the merged frame tree of flame.h, laid out like flamegraph.pl (one row per
 * depth, children ordered by label text, width proportional to samples,
 * root "all" at the bottom, or at the top for an icicle graph), with a small
 * script that makes it interactive without any network: hover details,
 * click to zoom, reset, and a search that highlights matching frames and
 * shows the share of samples they cover.
 *
 * Every frame is a <g class="frame"> carrying its label and numbers as data
 * attributes (data-name, data-x, data-n, data-self, data-depth), so that the
 * script and tests read the graph from the DOM. Frames narrower than a tenth
 * of a pixel are left out, as flamegraph.pl does, to bound the file's size.
 * Colours are warm and come from a hash of the frame's package (its file's
 * directory), shaded a little by the file, so one package keeps one colour
 * from run to run and from trace to trace.
 */
#include "flame.h"

#include <inttypes.h>
#include <string.h>

#define FLAME_DEFAULT_WIDTH 1200u
#define FLAME_MIN_WIDTH     200u
#define FLAME_MAX_WIDTH     20000u
#define FLAME_PAD           10.0
#define FLAME_ROW           16.0
#define FLAME_TOP           64.0
#define FLAME_BOTTOM        36.0
#define FLAME_FONT          12.0
#define FLAME_CHAR_WIDTH    (FLAME_FONT * 0.59) /* the script uses the same estimate */

const char flame_js[] =
    "function pyflameInit(svg, opts) {\n"
    "  \"use strict\";\n"
    "  opts = opts || {};\n"
    "  var X0 = +svg.getAttribute(\"data-graph-x\"), W = +svg.getAttribute(\"data-graph-width\");\n"
    "  var total = +svg.getAttribute(\"data-total\"), charW = 12 * 0.59;\n"
    "  var q = function (sel) { return svg.querySelector(sel); };\n"
    "  var details = q(\".details\"), matchedText = q(\".matched\"), resetBtn = "
    "q(\".reset-zoom\");\n"
    "  var searchBtn = q(\".search-button\"), clearBtn = q(\".clear-search\");\n"
    "  var frames = [].slice.call(svg.querySelectorAll(\"g.frame\")).map(function (g) {\n"
    "    return { g: g, x: +g.getAttribute(\"data-x\"), n: +g.getAttribute(\"data-n\"),\n"
    "             d: +g.getAttribute(\"data-depth\"), name: g.getAttribute(\"data-name\"),\n"
    "             self: +g.getAttribute(\"data-self\"),\n"
    "             rect: g.querySelector(\"rect\"), text: g.querySelector(\"text\") };\n"
    "  });\n"
    "  var byG = new Map(frames.map(function (f) { return [f.g, f]; }));\n"
    "  var term = \"\";\n"
    "  function pct(n) { return total ? (100 * n / total).toFixed(2) : \"0.00\"; }\n"
    "  function fit(name, w) {\n"
    "    var c = Math.floor((w - 6) / charW);\n"
    "    if (c < 3) return \"\";\n"
    "    return name.length > c ? name.substring(0, c - 2) + \"..\" : name;\n"
    "  }\n"
    "  function place(f, x, w) {\n"
    "    f.rect.setAttribute(\"x\", x.toFixed(2));\n"
    "    f.rect.setAttribute(\"width\", Math.max(w - 0.5, 0.1).toFixed(2));\n"
    "    f.text.setAttribute(\"x\", (x + 3).toFixed(2));\n"
    "    f.text.textContent = fit(f.name, w);\n"
    "  }\n"
    "  function zoom(z) {\n"
    "    var zx = z ? z.x : 0, zn = z ? z.n : total, zd = z ? z.d : 0;\n"
    "    if (!zn) return;\n"
    "    frames.forEach(function (f) {\n"
    "      var inside = f.d >= zd && f.x >= zx && f.x + f.n <= zx + zn;\n"
    "      var above = f.d < zd && f.x <= zx && f.x + f.n >= zx + zn;\n"
    "      f.g.classList.toggle(\"hide\", !(inside || above));\n"
    "      f.g.classList.toggle(\"parent\", above);\n"
    "      if (inside) place(f, X0 + (f.x - zx) / zn * W, f.n / zn * W);\n"
    "      else if (above) place(f, X0, W);\n"
    "    });\n"
    "    resetBtn.classList.toggle(\"hide\", !z || zd === 0);\n"
    "    svg.setAttribute(\"data-zoom\", z && zd > 0 ? z.name : \"\");\n"
    "  }\n"
    "  function search(t) {\n"
    "    term = t || \"\";\n"
    "    var re = null;\n"
    "    if (term) { try { re = new RegExp(term); } catch (e) { re = null; } }\n"
    "    var hits = [];\n"
    "    frames.forEach(function (f) {\n"
    "      var hit = !!term && f.d > 0 && (re ? re.test(f.name) : f.name.indexOf(term) >= 0);\n"
    "      f.g.classList.toggle(\"match\", hit);\n"
    "      if (hit) hits.push(f);\n"
    "    });\n"
    "    /* Frames either nest or do not overlap: count only the outermost hits. */\n"
    "    hits.sort(function (a, b) { return a.x - b.x || a.d - b.d; });\n"
    "    var end = -1, sum = 0;\n"
    "    hits.forEach(function (f) { if (f.x >= end) { sum += f.n; end = f.x + f.n; } });\n"
    "    svg.setAttribute(\"data-matched\", term ? String(sum) : \"\");\n"
    "    matchedText.textContent = term ? \"Matched: \" + pct(sum) + \"% (\" + sum + \" of \" + "
    "total + \" samples)\" : \"\";\n"
    "    clearBtn.classList.toggle(\"hide\", !term);\n"
    "    if (opts.input && opts.input.value !== term) opts.input.value = term;\n"
    "    return sum;\n"
    "  }\n"
    "  function ask() {\n"
    "    var t = window.prompt(\"Search frames (a regular expression):\", term);\n"
    "    if (t !== null) search(t);\n"
    "  }\n"
    "  svg.addEventListener(\"click\", function (e) {\n"
    "    var g = e.target.closest ? e.target.closest(\"g.frame\") : null;\n"
    "    var f = g && byG.get(g);\n"
    "    if (f) zoom(f.d > 0 ? f : null);\n"
    "  });\n"
    "  svg.addEventListener(\"mouseover\", function (e) {\n"
    "    var g = e.target.closest ? e.target.closest(\"g.frame\") : null;\n"
    "    var f = g && byG.get(g);\n"
    "    if (f) details.textContent = f.name + \": \" + f.n + \" samples (\" + pct(f.n) + \"%), "
    "self \" + f.self;\n"
    "  });\n"
    "  svg.addEventListener(\"mouseout\", function () { details.textContent = \" \"; });\n"
    "  resetBtn.addEventListener(\"click\", function (e) { e.stopPropagation(); zoom(null); });\n"
    "  searchBtn.addEventListener(\"click\", function (e) { e.stopPropagation(); if (opts.input) "
    "opts.input.focus(); else ask(); });\n"
    "  clearBtn.addEventListener(\"click\", function (e) { e.stopPropagation(); search(\"\"); });\n"
    "  if (opts.input) {\n"
    "    opts.input.addEventListener(\"input\", function () { search(opts.input.value); });\n"
    "  } else {\n"
    "    window.addEventListener(\"keydown\", function (e) {\n"
    "      if ((e.ctrlKey || e.metaKey) && (e.key === \"f\" || e.key === \"F\")) { "
    "e.preventDefault(); ask(); }\n"
    "      else if (e.key === \"Escape\") search(\"\");\n"
    "    });\n"
    "  }\n"
    "  svg.pyflame = { zoom: function (name) {\n"
    "      var f = frames.filter(function (x) { return x.name === name; })[0];\n"
    "      zoom(f && f.d > 0 ? f : null);\n"
    "    }, search: search, reset: function () { zoom(null); } };\n"
    "  return svg.pyflame;\n"
    "}\n";

static const char flame_css[] =
    ".pyflame text { font-family: Verdana, sans-serif; font-size: 12px; fill: #000; }\n"
    ".pyflame .title { font-size: 17px; }\n"
    ".pyflame .subtitle { fill: #555; }\n"
    ".pyflame .button { fill: #1a5aa6; cursor: pointer; text-decoration: underline; }\n"
    ".pyflame .hide { display: none; }\n"
    ".pyflame g.frame { cursor: pointer; }\n"
    ".pyflame g.frame text { font-size: 11px; pointer-events: none; }\n"
    ".pyflame g.frame:hover rect { stroke: #000; stroke-width: 0.5; }\n"
    ".pyflame g.parent rect { opacity: 0.5; }\n"
    ".pyflame g.match rect { fill: rgb(230,0,230); }\n"
    ".pyflame .matched { fill: #8a008a; }\n";

/* The package of a file: its directory, or the whole name when it has none. */
static size_t package_len(const char *file)
{
        const char *slash = strrchr(file, '/');
        return slash ? (size_t)(slash - file) : strlen(file);
}

/* A warm colour (reds, oranges, yellows) chosen by the label's package. */
static void frame_colour(const struct ex_label *l, bool root, char *buf, size_t len)
{
        if (root) {
                snprintf(buf, len, "rgb(214,214,214)");
                return;
        }
        if (l->kind == TRACE_FRAME_SPECIAL || l->kind == TRACE_FRAME_TASK || !*l->file) {
                snprintf(buf, len, "rgb(190,190,190)");
                return;
        }
        /* The package picks the colour; the file shades it a little, so that the
         * modules of one package stay alike but neighbours can be told apart. */
        uint64_t h = pf_hash_bytes(l->file, package_len(l->file), 0x70666c616d65ULL);
        uint64_t f = pf_hash_bytes(l->file, strlen(l->file), 0x66696c65ULL);
        unsigned r = 205 + (unsigned)(h % 51);
        unsigned g = 40 + (unsigned)((h >> 16) % 160) + (unsigned)(f % 21);
        unsigned b = (unsigned)((h >> 32) % 56);
        snprintf(buf, len, "rgb(%u,%u,%u)", r, g, b);
}

/*
 * The text shown inside a frame `w` pixels wide: the label cut to fit with
 * "..", cut on a UTF-8 boundary, or "" when not even three characters fit.
 */
static void frame_fit(const char *label, double w, char *buf, size_t len)
{
        double fit = (w - 6) / FLAME_CHAR_WIDTH;
        size_t chars = fit > 0 ? (size_t)fit : 0;
        buf[0] = '\0';
        if (chars < 3)
                return;
        size_t n = strlen(label);
        if (n <= chars && n < len) {
                memcpy(buf, label, n + 1);
                return;
        }
        size_t keep = chars - 2 < len - 3 ? chars - 2 : len - 3;
        while (keep > 0 && ((unsigned char)label[keep] & 0xc0) == 0x80)
                keep--;
        memcpy(buf, label, keep);
        memcpy(buf + keep, "..", 3);
}

static void write_frame(struct out *o, const struct ex_model *m, uint32_t n, double x, double w,
                        double y)
{
        const struct ex_node *node = &m->nodes[n];
        const struct ex_label *l = &m->labels[node->label];
        const char *name = n == 0 ? "all" : l->text;
        char colour[32], text[256];
        frame_colour(l, n == 0, colour, sizeof(colour));
        frame_fit(name, w, text, sizeof(text));
        double pct = m->total ? 100.0 * (double)node->total / (double)m->total : 0;
        out_puts(o, "<g class=\"frame\" data-name=\"");
        out_xml_text(o, name);
        out_printf(o,
                   "\" data-x=\"%" PRIu64 "\" data-n=\"%" PRIu64 "\" data-self=\"%" PRIu64
                   "\" data-depth=\"%u\">",
                   node->x, node->total, node->self, node->depth);
        out_puts(o, "<title>");
        out_xml_text(o, name);
        out_printf(o, "\n%" PRIu64 " samples (%.2f%%), self %" PRIu64 "</title>", node->total, pct,
                   node->self);
        out_printf(o,
                   "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                   "rx=\"2\" ry=\"2\"/>",
                   x, y, w - 0.5 > 0.1 ? w - 0.5 : 0.1, FLAME_ROW - 1, colour);
        out_printf(o, "<text x=\"%.2f\" y=\"%.1f\">", x + 3, y + FLAME_ROW - 4.5);
        out_xml_text(o, text);
        out_puts(o, "</text></g>\n");
}

void flame_write_svg(struct out *o, const struct ex_model *m, const struct flame_svg_opts *opt)
{
        unsigned width = opt->width ? opt->width : FLAME_DEFAULT_WIDTH;
        if (width < FLAME_MIN_WIDTH)
                width = FLAME_MIN_WIDTH;
        if (width > FLAME_MAX_WIDTH)
                width = FLAME_MAX_WIDTH;
        double gw = width - 2 * FLAME_PAD;
        uint32_t rows = m->total ? m->max_depth + 1 : 1;
        double height = FLAME_TOP + rows * FLAME_ROW + FLAME_BOTTOM;

        if (!opt->inline_html)
                out_puts(o, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n");
        out_printf(o,
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" class=\"pyflame\" "
                   "width=\"%u\" height=\"%.0f\" viewBox=\"0 0 %u %.0f\" data-total=\"%" PRIu64
                   "\" data-graph-x=\"%.0f\" data-graph-width=\"%.0f\" data-icicle=\"%d\"%s>\n",
                   width, height, width, height, m->total, FLAME_PAD, gw, opt->icicle ? 1 : 0,
                   opt->inline_html ? " id=\"flamegraph\"" : "");
        out_printf(o, "<style>\n%s</style>\n", flame_css);
        out_printf(o, "<rect x=\"0\" y=\"0\" width=\"%u\" height=\"%.0f\" fill=\"#fbf8f3\"/>\n",
                   width, height);
        out_printf(o, "<text class=\"title\" x=\"%.1f\" y=\"24\" text-anchor=\"middle\">",
                   width / 2.0);
        out_xml_text(o, opt->title);
        out_printf(o,
                   "</text>\n<text class=\"subtitle\" x=\"%.1f\" y=\"42\" "
                   "text-anchor=\"middle\">",
                   width / 2.0);
        out_xml_text(o, opt->subtitle);
        out_puts(o, "</text>\n");
        out_printf(o,
                   "<text class=\"button reset-zoom hide\" x=\"%.0f\" y=\"56\">Reset Zoom</text>\n",
                   FLAME_PAD);
        out_printf(o,
                   "<text class=\"button search-button\" x=\"%.0f\" y=\"56\" "
                   "text-anchor=\"end\">Search</text>\n",
                   width - FLAME_PAD);
        out_printf(o,
                   "<text class=\"button clear-search hide\" x=\"%.0f\" y=\"56\" "
                   "text-anchor=\"end\">Clear search</text>\n",
                   width - FLAME_PAD - 70);

        out_puts(o, "<g class=\"frames\">\n");
        if (m->total == 0) {
                out_printf(
                    o, "<text class=\"empty\" x=\"%.0f\" y=\"%.0f\">No samples selected.</text>\n",
                    FLAME_PAD, FLAME_TOP + FLAME_ROW - 4);
        }
        for (uint32_t n = 0; m->total && n < m->n_nodes; n++) {
                const struct ex_node *node = &m->nodes[n];
                double w = gw * (double)node->total / (double)m->total;
                if (node->total == 0 || w < 0.1)
                        continue;
                double x = FLAME_PAD + gw * (double)node->x / (double)m->total;
                double y = opt->icicle ? FLAME_TOP + node->depth * FLAME_ROW
                                       : FLAME_TOP + (rows - 1 - node->depth) * FLAME_ROW;
                write_frame(o, m, n, x, w, y);
        }
        out_puts(o, "</g>\n");
        out_printf(o, "<text class=\"details\" x=\"%.0f\" y=\"%.0f\"> </text>\n", FLAME_PAD,
                   height - 14);
        out_printf(o, "<text class=\"matched\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\"></text>\n",
                   width - FLAME_PAD, height - 14);
        if (!opt->inline_html) {
                out_puts(o, "<script type=\"text/ecmascript\"><![CDATA[\n");
                out_puts(o, flame_js);
                out_puts(o, "pyflameInit(document.documentElement);\n]]></script>\n");
        }
        out_puts(o, "</svg>\n");
}
