/*
 * flame.h - the layer every exporter (export_*.c) is built on: the merged
 * frame tree of a trace, output helpers, and the flame-graph SVG writer that
 * the svg and html formats share.
 *
 * The model (struct ex_model) is made from one trace_reader_count_by_stack()
 * pass plus the stack tree libtrace loaded at open, so its cost is in
 * distinct frames and stacks, never in samples:
 *   - every frame gets a label, "name (file:line)" with the qualname as name
 *     when the frame has one, the convention of the folded view; frames that
 *     print the same share one label id;
 *   - every stack maps to a node of a tree merged by label per level (the
 *     flamegraph.pl rule): a node is a distinct root-first sequence of labels,
 *     so two stacks that print the same are one node. Samples with no Python
 *     frame go to a node of their own labelled EX_EMPTY_LABEL;
 *   - nodes carry self and total samples under the filter, and a flame-graph
 *     layout (children ordered by label text, bytewise).
 * Exporters that need time order (speedscope, chrome) or per-sample labels
 * (pprof) then make one trace_reader_foreach_sample() pass and map each
 * sample's stack to its node.
 *
 * Internal to pyflame-report; prefixes ex_ and flame_.
 */
#ifndef PYFLAME_FLAME_H
#define PYFLAME_FLAME_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "export.h"
#include "out.h"
#include "pfutil.h"
#include "trace.h"

/* ------------------------------------------------------------------ */
/* Output                                                              */
/* ------------------------------------------------------------------ */

/* `ns` nanoseconds as microseconds with three decimals ("12.345"), exactly. */
void ex_us(struct out *o, int64_t ns);

/* Append `s` to `b` as valid UTF-8 (invalid bytes become U+FFFD). Returns 0 or -1. */
int ex_utf8_clean(struct pf_buf *b, const char *s);

/* ------------------------------------------------------------------ */
/* An interning map: byte strings to dense ids 0, 1, 2...              */
/* ------------------------------------------------------------------ */

struct ex_map {
        uint32_t *slots; /* id + 1, 0 when empty; capacity a power of two */
        size_t cap;
        struct pf_buf keys; /* key bytes, back to back */
        size_t *key_off;    /* n + 1 offsets into keys */
        uint32_t n, cap_ids;
};

/*
 * The id of `key` (len bytes), adding it when new. Returns 1 when added, 0
 * when it was there, -1 when out of memory (map unchanged).
 */
int ex_map_intern(struct ex_map *m, const void *key, size_t len, uint32_t *id);
/* The bytes of id `id` (< m->n); valid until the next intern. */
const void *ex_map_key(const struct ex_map *m, uint32_t id, size_t *len);
void ex_map_free(struct ex_map *m);

/* ------------------------------------------------------------------ */
/* The model                                                           */
/* ------------------------------------------------------------------ */

/* Label id 0 is always the pseudo frame of samples with no Python frame. */
#define EX_EMPTY_LABEL "<no Python frame>"
#define EX_LABEL_EMPTY 0u

struct ex_label {
        const char *text; /* "name (file:line)", NUL-terminated, owned by the model */
        const char *name; /* qualname when recorded, else function; owned by reader or model */
        const char *file; /* "" for the empty pseudo frame; owned by reader or model */
        int32_t line, first_line; /* -1 when unknown */
        enum trace_frame_kind kind;
        uint32_t rank; /* position of `text` in bytewise order among all labels */
};

/* Node 0 is the root (no label, depth 0); every other node has depth >= 1. */
struct ex_node {
        uint32_t parent, label, depth;
        uint32_t child_first, n_children; /* children[child_first...], ordered by label text */
        uint64_t self, total;             /* samples under the filter */
        uint64_t x;                       /* samples left of this node in the flame-graph layout */
};

struct ex_model {
        struct trace_reader *r;
        struct trace_summary summary;
        int64_t from_ns, to_ns; /* the time range selected (to_ns: end of the recording if open) */
        double period_ns;       /* 1e9 / rate_hz, or 10 ms when the rate is unknown */
        uint64_t total;         /* samples selected */
        uint64_t *counts;       /* per stack id, from count_by_stack */
        uint32_t n_stacks;
        struct ex_label *labels;
        uint32_t n_labels;
        uint32_t *frame_label; /* frame id -> label id ([0] unused) */
        struct ex_node *nodes;
        uint32_t n_nodes;
        uint32_t *stack_node;    /* stack id -> node id ([0]: the empty-frame node) */
        uint32_t *children;      /* n_nodes - 1 node ids, grouped by parent */
        uint32_t max_depth;      /* deepest node with samples */
        struct ex_map label_map; /* label texts (NUL included) to label ids */
        char *err;               /* where ex_fail writes; errlen bytes */
        size_t errlen;
};

/*
 * Load the model of the samples `filter` selects. Returns 0, or a negative
 * trace_status with a message in err (the model then holds nothing to free
 * beyond what ex_model_free releases, which is safe to call).
 */
int ex_model_load(struct ex_model *m, struct trace_reader *r, const struct trace_filter *filter,
                  char *err, size_t errlen);
void ex_model_free(struct ex_model *m);

/*
 * Node of a sample's stack. Returns the node id, or UINT32_MAX when the stack
 * id is not in the trace (a damaged trace: the reader should have refused it).
 */
uint32_t ex_model_stack_node(const struct ex_model *m, uint32_t stack);
/*
 * The node of a sample's stack, after checking that the sample refers to a
 * stack and a thread (1..max_ref) the trace holds. A sample that does not
 * sets the model's message (the file is damaged) and *status to
 * TRACE_ERR_CORRUPT, and gives UINT32_MAX: the exporters' sample callbacks
 * then stop the read.
 */
uint32_t ex_sample_node(struct ex_model *m, const struct trace_sample *s, uint32_t max_ref,
                        int *status);

/*
 * Root-first node ids of node `n`'s path (the root excluded) into `path`,
 * which holds m->nodes[n].depth entries. Returns the depth.
 */
uint32_t ex_model_path(const struct ex_model *m, uint32_t n, uint32_t *path);

/* Record a one-line message in m->err and return `status`. */
int ex_fail(struct ex_model *m, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The message for a libtrace failure `status` met while reading. */
int ex_fail_read(struct ex_model *m, int status);

/*
 * A short description of the selection for titles: "1234 samples, 12.500 s,
 * 100 Hz (recording: 3 threads, 1 process)". Into buf (NUL-terminated).
 */
void ex_model_describe(const struct ex_model *m, char *buf, size_t len);

/* Thread ref -> index for trace_reader_thread_at, UINT32_MAX if unknown; malloc'ed. */
uint32_t *ex_thread_index(struct ex_model *m, uint32_t *max_ref);

/* ------------------------------------------------------------------ */
/* Flame graph (flame.c)                                               */
/* ------------------------------------------------------------------ */

struct flame_svg_opts {
        const char *title, *subtitle;
        bool icicle;
        unsigned width;
        bool inline_html; /* an <svg> element for an HTML page; its script comes from flame_js */
};

/* Write the flame graph of `m` as SVG: a whole document, or an element for HTML. */
void flame_write_svg(struct out *o, const struct ex_model *m, const struct flame_svg_opts *opt);

/*
 * The flame graph's script: defines pyflameInit(svgElement), which wires
 * hover details, click-to-zoom, reset, search (Ctrl-F, the Search button)
 * and its matched percentage. Contains neither "]]>" nor "</".
 */
extern const char flame_js[];

/* ------------------------------------------------------------------ */
/* The formats (export_*.c)                                            */
/* ------------------------------------------------------------------ */

/*
 * Each writes the whole document for `m` to `o`. `filter` is the one the model
 * was loaded with (for the exporters that make their own sample pass).
 * Returns 0, or a negative trace_status with the message set by ex_fail.
 * Write failures are left in `o` for the caller to find.
 */
typedef int (*export_fn)(struct ex_model *m, const struct trace_filter *filter,
                         const struct export_options *opt, struct out *o);
int export_svg(struct ex_model *m, const struct trace_filter *filter,
               const struct export_options *opt, struct out *o);
int export_html(struct ex_model *m, const struct trace_filter *filter,
                const struct export_options *opt, struct out *o);
int export_speedscope(struct ex_model *m, const struct trace_filter *filter,
                      const struct export_options *opt, struct out *o);
int export_pprof(struct ex_model *m, const struct trace_filter *filter,
                 const struct export_options *opt, struct out *o);
int export_chrome(struct ex_model *m, const struct trace_filter *filter,
                  const struct export_options *opt, struct out *o);

#endif
