/*
 * export_common.c - what every exporter shares: the entry point and its
 * table of formats, the buffered output with UTF-8-safe JSON and XML
 * escaping, an interning map, and the merged frame tree (struct ex_model)
 * described in flame.h.
 *
 * Traces are untrusted input: a frame string may hold any bytes, and stack
 * and thread references are checked against what the reader loaded before
 * they index anything, even though the reader validated them at open.
 */
#include "flame.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- the entry point ---- */

static const struct {
        const char *name;
        export_fn fn;
} export_formats[] = {
    {"svg", export_svg},     {"html", export_html},     {"speedscope", export_speedscope},
    {"pprof", export_pprof}, {"chrome", export_chrome},
};

static export_fn export_lookup(const char *format)
{
        for (size_t i = 0; format && i < sizeof(export_formats) / sizeof(export_formats[0]); i++)
                if (strcmp(format, export_formats[i].name) == 0)
                        return export_formats[i].fn;
        return NULL;
}

bool export_format_known(const char *format)
{
        return export_lookup(format) != NULL;
}

int export_to(struct trace_reader *r, const struct trace_filter *filter, const char *format,
              const struct export_options *opt, struct out *o, char *err, size_t errlen)
{
        static const struct export_options defaults = {0};
        if (errlen)
                err[0] = '\0';
        export_fn fn = export_lookup(format);
        if (!fn) {
                if (errlen)
                        snprintf(err, errlen, "unknown export format '%s' (known: %s)",
                                 format ? format : "", EXPORT_FORMATS);
                return TRACE_ERR_ARG;
        }
        struct ex_model m = {0};
        int rc = ex_model_load(&m, r, filter, err, errlen);
        if (rc == 0)
                rc = fn(&m, filter, opt ? opt : &defaults, o);
        if (rc == 0 && o->nomem)
                rc = ex_fail(&m, TRACE_ERR_NOMEM, "out of memory while writing the %s export",
                             format);
        ex_model_free(&m);
        return rc;
}

int export_write(struct trace_reader *r, const struct trace_filter *filter, const char *format,
                 const struct export_options *opt, FILE *f, char *err, size_t errlen)
{
        struct out o = {0};
        int rc = export_to(r, filter, format, opt, &o, err, errlen);
        if (rc == 0 && ((o.buf.len && fwrite(o.buf.data, 1, o.buf.len, f) != o.buf.len) ||
                        fflush(f) != 0 || ferror(f))) {
                int e = errno ? errno : EIO;
                if (errlen)
                        snprintf(err, errlen, "cannot write the %s export: %s", format,
                                 strerror(e));
                rc = TRACE_ERR_IO;
        }
        out_free(&o);
        return rc;
}

/* ---- text ---- */

int ex_utf8_clean(struct pf_buf *b, const char *s)
{
        return pf_buf_append_utf8(b, s, strlen(s));
}

void ex_us(struct out *o, int64_t ns)
{
        const char *sign = ns < 0 ? "-" : "";
        uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
        out_printf(o, "%s%" PRIu64 ".%03" PRIu64, sign, a / 1000, a % 1000);
}

/* ---- interning map ---- */

static uint64_t ex_map_hash(const void *key, size_t len)
{
        return pf_hash_bytes(key, len, 0x9e3779b97f4a7c15ULL);
}

static bool ex_map_equal(const struct ex_map *m, uint32_t id, const void *key, size_t len)
{
        size_t off = m->key_off[id], n = m->key_off[id + 1] - off;
        return n == len && memcmp(m->keys.data + off, key, len) == 0;
}

static int ex_map_grow(struct ex_map *m)
{
        size_t cap = m->cap ? m->cap * 2 : 64;
        uint32_t *slots = calloc(cap, sizeof(*slots));
        if (!slots)
                return -1;
        for (uint32_t id = 0; id < m->n; id++) {
                size_t len;
                const void *key = ex_map_key(m, id, &len);
                size_t i = ex_map_hash(key, len) & (cap - 1);
                while (slots[i])
                        i = (i + 1) & (cap - 1);
                slots[i] = id + 1;
        }
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
        return 0;
}

int ex_map_intern(struct ex_map *m, const void *key, size_t len, uint32_t *id)
{
        /* Keep the load at most one half so that probing stays short and ends. */
        if ((size_t)m->n + 1 > m->cap / 2 && ex_map_grow(m) < 0)
                return -1;
        uint64_t h = ex_map_hash(key, len);
        size_t i = h & (m->cap - 1);
        while (m->slots[i]) {
                if (ex_map_equal(m, m->slots[i] - 1, key, len)) {
                        *id = m->slots[i] - 1;
                        return 0;
                }
                i = (i + 1) & (m->cap - 1);
        }
        if (m->n >= UINT32_MAX - 1)
                return -1;
        if (m->n + 2 > m->cap_ids) {
                uint32_t cap = m->cap_ids ? m->cap_ids * 2 : 64;
                size_t *off = reallocarray(m->key_off, cap, sizeof(*off));
                if (!off)
                        return -1;
                m->key_off = off;
                m->cap_ids = cap;
        }
        if (m->n == 0)
                m->key_off[0] = 0;
        if (pf_buf_append(&m->keys, key, len) < 0)
                return -1;
        m->key_off[m->n + 1] = m->keys.len;
        m->slots[i] = m->n + 1;
        *id = m->n++;
        return 1;
}

const void *ex_map_key(const struct ex_map *m, uint32_t id, size_t *len)
{
        *len = m->key_off[id + 1] - m->key_off[id];
        return m->keys.data + m->key_off[id];
}

void ex_map_free(struct ex_map *m)
{
        free(m->slots);
        free(m->key_off);
        pf_buf_free(&m->keys);
        *m = (struct ex_map){0};
}

/* ---- messages ---- */

int ex_fail(struct ex_model *m, int status, const char *fmt, ...)
{
        if (m->errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(m->err, m->errlen, fmt, ap);
                va_end(ap);
        }
        return status;
}

int ex_fail_read(struct ex_model *m, int status)
{
        if (status == TRACE_ERR_NOMEM)
                return ex_fail(m, status, "out of memory while reading the trace");
        const char *detail = m->r ? trace_reader_errmsg(m->r) : "";
        if (!detail || !*detail)
                detail = trace_status_str(status);
        return ex_fail(m, status, "cannot read the trace: %s", detail);
}

/* ---- the model ---- */

/* The folded view's label of a frame: "name (file:line)", "name (file)", or "name". */
static int label_text(struct pf_buf *b, const struct trace_frame *f)
{
        const char *name = f->qualname && *f->qualname ? f->qualname : f->function;
        if (!name)
                name = "";
        if (pf_buf_append(b, name, strlen(name)) < 0)
                return -1;
        if (f->kind != TRACE_FRAME_SPECIAL && f->kind != TRACE_FRAME_TASK && f->file && *f->file) {
                char line[16] = "";
                if (f->line >= 0)
                        snprintf(line, sizeof(line), ":%d", (int)f->line);
                if (pf_buf_append(b, " (", 2) < 0 ||
                    pf_buf_append(b, f->file, strlen(f->file)) < 0 ||
                    pf_buf_append(b, line, strlen(line)) < 0 || pf_buf_append(b, ")", 1) < 0)
                        return -1;
        }
        return pf_buf_append(b, "", 1); /* the NUL, part of the interned key */
}

static int label_add(struct ex_model *m, const struct trace_frame *f, struct pf_buf *tmp,
                     uint32_t *id)
{
        tmp->len = 0;
        if (label_text(tmp, f) < 0)
                return TRACE_ERR_NOMEM;
        int added = ex_map_intern(&m->label_map, tmp->data, tmp->len, id);
        if (added < 0)
                return TRACE_ERR_NOMEM;
        if (!added)
                return 0;
        if (*id != m->n_labels)
                return TRACE_ERR_NOMEM; /* cannot happen: ids are dense */
        struct ex_label *l = &m->labels[m->n_labels++];
        l->name = f->qualname && *f->qualname ? f->qualname : (f->function ? f->function : "");
        l->file = f->file ? f->file : "";
        l->line = f->line;
        l->first_line = f->first_line;
        l->kind = f->kind;
        return 0;
}

static int label_rank_cmp(const void *a, const void *b, void *ctx)
{
        const struct ex_label *labels = ctx;
        return strcmp(labels[*(const uint32_t *)a].text, labels[*(const uint32_t *)b].text);
}

static int model_labels(struct ex_model *m)
{
        struct trace_reader *r = m->r;
        uint32_t n_frames = trace_reader_frame_count(r);
        m->frame_label = calloc((size_t)n_frames + 1, sizeof(*m->frame_label));
        m->labels = calloc((size_t)n_frames + 1, sizeof(*m->labels));
        if (!m->frame_label || !m->labels)
                return ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        struct pf_buf tmp = {0};
        struct trace_frame empty = {.function = EX_EMPTY_LABEL,
                                    .file = "",
                                    .line = -1,
                                    .first_line = -1,
                                    .kind = TRACE_FRAME_SPECIAL};
        uint32_t id;
        int rc = label_add(m, &empty, &tmp, &id);
        for (uint32_t fid = 1; rc == 0 && fid <= n_frames; fid++) {
                struct trace_frame f;
                rc = trace_reader_frame(r, fid, &f);
                if (rc < 0) {
                        pf_buf_free(&tmp);
                        return ex_fail_read(m, rc);
                }
                rc = label_add(m, &f, &tmp, &m->frame_label[fid]);
        }
        pf_buf_free(&tmp);
        if (rc < 0)
                return ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        /* The key buffer no longer moves: point the labels into it. */
        for (uint32_t i = 0; i < m->n_labels; i++) {
                size_t len;
                m->labels[i].text = ex_map_key(&m->label_map, i, &len);
        }
        uint32_t *order = malloc((size_t)m->n_labels * sizeof(*order));
        if (!order)
                return ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < m->n_labels; i++)
                order[i] = i;
        qsort_r(order, m->n_labels, sizeof(*order), label_rank_cmp, m->labels);
        for (uint32_t i = 0; i < m->n_labels; i++)
                m->labels[order[i]].rank = i;
        free(order);
        return 0;
}

/* The node for (parent node, label), made when new. Returns its id or UINT32_MAX. */
static uint32_t node_child(struct ex_model *m, struct ex_map *nodes, uint32_t parent,
                           uint32_t label)
{
        uint32_t key[2] = {parent, label}, id;
        int added = ex_map_intern(nodes, key, sizeof(key), &id);
        if (added < 0)
                return UINT32_MAX;
        id++; /* node 0 is the root, which is not in the map */
        if (added) {
                struct ex_node *n = &m->nodes[id];
                n->parent = parent;
                n->label = label;
                n->depth = m->nodes[parent].depth + 1;
                m->n_nodes = id + 1;
        }
        return id;
}

struct child_key {
        uint32_t parent, rank, node;
};

static int child_key_cmp(const void *a, const void *b)
{
        const struct child_key *x = a, *y = b;
        if (x->parent != y->parent)
                return x->parent < y->parent ? -1 : 1;
        return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int model_tree(struct ex_model *m)
{
        struct trace_reader *r = m->r;
        uint32_t n_stacks = m->n_stacks, n_frames = trace_reader_frame_count(r);
        /* At most one node per stack plus the root and the empty-frame node. */
        m->nodes = calloc((size_t)n_stacks + 2, sizeof(*m->nodes));
        m->stack_node = calloc((size_t)n_stacks + 1, sizeof(*m->stack_node));
        if (!m->nodes || !m->stack_node)
                return ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        m->n_nodes = 1;
        struct ex_map nodes = {0};
        int rc = 0;
        uint32_t empty = node_child(m, &nodes, 0, EX_LABEL_EMPTY);
        if (empty == UINT32_MAX)
                rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        m->stack_node[0] = empty;
        for (uint32_t s = 1; rc == 0 && s < n_stacks; s++) {
                uint32_t parent, frame;
                int st = trace_reader_stack_node(r, s, &parent, &frame);
                if (st < 0) {
                        rc = ex_fail_read(m, st);
                } else if (parent >= s || frame == 0 || frame > n_frames) {
                        rc = ex_fail(m, TRACE_ERR_CORRUPT,
                                     "cannot read the trace: stack %u refers to stack %u and "
                                     "frame %u (the file is damaged)",
                                     s, parent, frame);
                } else {
                        uint32_t pn = parent == TRACE_STACK_EMPTY ? 0 : m->stack_node[parent];
                        m->stack_node[s] = node_child(m, &nodes, pn, m->frame_label[frame]);
                        if (m->stack_node[s] == UINT32_MAX)
                                rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
                }
        }
        ex_map_free(&nodes);
        if (rc < 0)
                return rc;
        for (uint32_t s = 0; s < n_stacks; s++)
                m->nodes[m->stack_node[s]].self += m->counts[s];
        /* Parents have smaller ids than their children: one backward sweep sums. */
        for (uint32_t n = m->n_nodes; n-- > 1;)
                m->nodes[n].total += m->nodes[n].self;
        for (uint32_t n = m->n_nodes; n-- > 1;)
                m->nodes[m->nodes[n].parent].total += m->nodes[n].total;
        m->nodes[0].total += m->nodes[0].self;
        for (uint32_t n = 0; n < m->n_nodes; n++)
                if (m->nodes[n].total && m->nodes[n].depth > m->max_depth)
                        m->max_depth = m->nodes[n].depth;
        return 0;
}

/* Order every node's children by label text and give each node its x. */
static int model_layout(struct ex_model *m)
{
        uint32_t n_children = m->n_nodes - 1;
        struct child_key *keys = malloc(((size_t)n_children + 1) * sizeof(*keys));
        m->children = malloc(((size_t)n_children + 1) * sizeof(*m->children));
        if (!keys || !m->children) {
                free(keys);
                return ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        }
        for (uint32_t n = 1; n < m->n_nodes; n++)
                keys[n - 1] =
                    (struct child_key){m->nodes[n].parent, m->labels[m->nodes[n].label].rank, n};
        qsort(keys, n_children, sizeof(*keys), child_key_cmp);
        for (uint32_t i = 0; i < n_children; i++) {
                struct ex_node *p = &m->nodes[keys[i].parent];
                if (p->n_children == 0)
                        p->child_first = i;
                p->n_children++;
                m->children[i] = keys[i].node;
        }
        free(keys);
        /* Parents come before children in id order, so every x is set before it is read. */
        for (uint32_t n = 0; n < m->n_nodes; n++) {
                const struct ex_node *p = &m->nodes[n];
                uint64_t x = p->x;
                for (uint32_t i = 0; i < p->n_children; i++) {
                        struct ex_node *c = &m->nodes[m->children[p->child_first + i]];
                        c->x = x;
                        x += c->total;
                }
        }
        return 0;
}

int ex_model_load(struct ex_model *m, struct trace_reader *r, const struct trace_filter *filter,
                  char *err, size_t errlen)
{
        *m = (struct ex_model){.r = r, .err = err, .errlen = errlen};
        int rc = trace_reader_summary(r, &m->summary);
        if (rc < 0)
                return ex_fail_read(m, rc);
        m->period_ns = m->summary.rate_hz > 0 ? 1e9 / m->summary.rate_hz : 1e7;
        m->from_ns = filter ? filter->from_ns : 0;
        m->to_ns = filter && filter->to_ns ? filter->to_ns : m->summary.duration_ns;
        rc = trace_reader_count_by_stack(r, filter, &m->counts, &m->total);
        if (rc < 0)
                return ex_fail_read(m, rc);
        m->n_stacks = trace_reader_stack_count(r);
        if (m->n_stacks == 0)
                return ex_fail(
                    m, TRACE_ERR_CORRUPT,
                    "cannot read the trace: it has no empty stack (the file is damaged)");
        rc = model_labels(m);
        if (rc == 0)
                rc = model_tree(m);
        if (rc == 0)
                rc = model_layout(m);
        return rc;
}

void ex_model_free(struct ex_model *m)
{
        free(m->counts);
        free(m->labels);
        free(m->frame_label);
        free(m->nodes);
        free(m->stack_node);
        free(m->children);
        ex_map_free(&m->label_map);
        m->counts = NULL;
        m->labels = NULL;
        m->frame_label = NULL;
        m->nodes = NULL;
        m->stack_node = NULL;
        m->children = NULL;
}

uint32_t ex_model_stack_node(const struct ex_model *m, uint32_t stack)
{
        return stack < m->n_stacks ? m->stack_node[stack] : UINT32_MAX;
}

uint32_t ex_model_path(const struct ex_model *m, uint32_t n, uint32_t *path)
{
        uint32_t depth = m->nodes[n].depth;
        /* Depths fall by one per parent link, so this ends at the root. */
        for (uint32_t i = depth; i > 0; i--) {
                path[i - 1] = n;
                n = m->nodes[n].parent;
        }
        return depth;
}

void ex_model_describe(const struct ex_model *m, char *buf, size_t len)
{
        double secs = (double)(m->to_ns - m->from_ns) / 1e9;
        char rate[32] = "rate unknown";
        if (m->summary.rate_hz > 0)
                snprintf(rate, sizeof(rate), "%g Hz", m->summary.rate_hz);
        /* Thread and process counts are the recording's: the selection may hold fewer. */
        snprintf(buf, len, "%" PRIu64 " samples, %.3f s, %s (recording: %u thread%s, %u process%s)",
                 m->total, secs < 0 ? 0.0 : secs, rate, m->summary.threads,
                 m->summary.threads == 1 ? "" : "s", m->summary.processes,
                 m->summary.processes == 1 ? "" : "es");
}

uint32_t *ex_thread_index(struct ex_model *m, uint32_t *max_ref)
{
        uint32_t n = trace_reader_thread_count(m->r);
        uint32_t *idx = malloc(((size_t)n + 1) * sizeof(*idx));
        if (!idx)
                return NULL;
        for (uint32_t i = 0; i <= n; i++)
                idx[i] = UINT32_MAX;
        for (uint32_t i = 0; i < n; i++) {
                struct trace_thread t;
                /* References are dense from 1 (schema/trace.sql): others are ignored. */
                if (trace_reader_thread_at(m->r, i, &t) == 0 && t.ref >= 1 && t.ref <= n)
                        idx[t.ref] = i;
        }
        *max_ref = n;
        return idx;
}

uint32_t ex_sample_node(struct ex_model *m, const struct trace_sample *s, uint32_t max_ref,
                        int *status)
{
        uint32_t node = ex_model_stack_node(m, s->stack);
        if (node != UINT32_MAX && s->thread != 0 && s->thread <= max_ref)
                return node;
        *status = ex_fail(m, TRACE_ERR_CORRUPT,
                          "cannot read the trace: a sample refers to stack %u of thread %u, "
                          "which the trace does not hold (the file is damaged)",
                          s->stack, s->thread);
        return UINT32_MAX;
}
