/*
 * aggregate.c - the aggregations pyflame-report's views are made of.
 *
 * Everything starts from one trace_reader_count_by_stack() pass: samples per
 * distinct stack. The rest works per distinct stack, never per sample, so a
 * ten-million-sample trace costs one library pass plus work proportional to
 * its few thousand stacks:
 *   - folded stacks label each stack once (each frame's label is made once
 *     and reused), then sort the lines by text;
 *   - hotspot tables map every frame to a row identity (a (file, line) or a
 *     (function, file, first_line)), then for each stack add its count to the
 *     self of its top frame's row and to the total of each distinct row on
 *     it. A per-row stamp holding the last stack that touched it keeps a
 *     recursive function from being counted twice in one stack, so a total
 *     is a number of samples and never exceeds 100%.
 * Time slices (--slices, and the time blocks of diff's variance) come from
 * one trace_reader_foreach_sample() pass counting per (slice, stack) in a
 * hash table; each slice's stacks are then mapped onto the rows of the
 * whole selection's table (hot_table_count, folded_set.line_of_stack), so a
 * row is the same row in every slice.
 */
#include "report.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stack_counts_build(struct trace_reader *r, const struct trace_filter *f,
                       struct stack_counts *out)
{
        uint64_t *counts = NULL, total = 0;
        int rc = trace_reader_count_by_stack(r, f, &counts, &total);
        if (rc < 0)
                return rc;
        out->counts = counts;
        out->n_stacks = trace_reader_stack_count(r);
        out->total = total;
        return 0;
}

void stack_counts_free(struct stack_counts *sc)
{
        free(sc->counts);
        sc->counts = NULL;
        sc->n_stacks = 0;
}

const char *frame_name(const struct trace_frame *f)
{
        return f->qualname && *f->qualname ? f->qualname : f->function;
}

int frame_label(struct pf_buf *b, const struct trace_frame *f)
{
        const char *name = frame_name(f);
        if (pf_buf_append(b, name, strlen(name)) < 0)
                return -1;
        if (f->kind == TRACE_FRAME_SPECIAL || f->kind == TRACE_FRAME_TASK || !f->file || !*f->file)
                return 0;
        char line[16] = "";
        if (f->line >= 0)
                snprintf(line, sizeof(line), ":%d", (int)f->line);
        if (pf_buf_append(b, " (", 2) < 0 || pf_buf_append(b, f->file, strlen(f->file)) < 0 ||
            pf_buf_append(b, line, strlen(line)) < 0 || pf_buf_append(b, ")", 1) < 0)
                return -1;
        return 0;
}

/* Frames of a stack, root first, in a buffer reused from stack to stack. */
struct frame_buf {
        uint32_t *ids;
        size_t cap;
};

/* Fill fb with the frames of `stack`; returns the depth or a negative status. */
static int frame_buf_load(struct frame_buf *fb, const struct trace_reader *r, uint32_t stack)
{
        size_t depth = trace_reader_stack_depth(r, stack);
        /* Only the empty stack has no frame; the int return bounds the depth. */
        if (depth == 0 || depth > INT32_MAX)
                return TRACE_ERR_CORRUPT;
        if (depth > fb->cap) {
                uint32_t *p = reallocarray(fb->ids, depth, sizeof(*p));
                if (!p)
                        return TRACE_ERR_NOMEM;
                fb->ids = p;
                fb->cap = depth;
        }
        int n = trace_reader_stack_frames(r, stack, fb->ids, fb->cap);
        if (n < 0)
                return n;
        /* The reader validated the tree at open: the depth cannot change under us. */
        if ((size_t)n != depth)
                return TRACE_ERR_CORRUPT;
        return n;
}

/* ---- folded stacks ---- */

/* Each frame's folded label, made once: [off, off+len) in `text`. */
struct label_cache {
        uint32_t *off, *len; /* indexed by frame id; len UINT32_MAX until made */
        uint32_t n_frames;
        struct pf_buf text;
};

static int label_cache_init(struct label_cache *lc, const struct trace_reader *r)
{
        lc->n_frames = trace_reader_frame_count(r);
        lc->off = calloc((size_t)lc->n_frames + 1, sizeof(*lc->off));
        lc->len = malloc(((size_t)lc->n_frames + 1) * sizeof(*lc->len));
        if (!lc->off || !lc->len)
                return TRACE_ERR_NOMEM;
        memset(lc->len, 0xff, ((size_t)lc->n_frames + 1) * sizeof(*lc->len));
        return 0;
}

static void label_cache_free(struct label_cache *lc)
{
        free(lc->off);
        free(lc->len);
        pf_buf_free(&lc->text);
}

/* Append frame `id`'s label to `b`, with ';' and control characters made '?'. */
static int label_append(struct label_cache *lc, const struct trace_reader *r, uint32_t id,
                        struct pf_buf *b)
{
        if (id == 0 || id > lc->n_frames)
                return TRACE_ERR_CORRUPT;
        if (lc->len[id] == UINT32_MAX) {
                struct trace_frame f;
                int rc = trace_reader_frame(r, id, &f);
                if (rc < 0)
                        return rc;
                size_t start = lc->text.len;
                if (frame_label(&lc->text, &f) < 0)
                        return TRACE_ERR_NOMEM;
                if (lc->text.len - start >= UINT32_MAX || lc->text.len >= UINT32_MAX)
                        return TRACE_ERR_NOMEM;
                for (size_t i = start; i < lc->text.len; i++)
                        if (lc->text.data[i] == ';' || lc->text.data[i] < 0x20 ||
                            lc->text.data[i] == 0x7f)
                                lc->text.data[i] = '?';
                lc->off[id] = (uint32_t)start;
                lc->len[id] = (uint32_t)(lc->text.len - start);
        }
        if (pf_buf_append(b, lc->text.data + lc->off[id], lc->len[id]) < 0)
                return TRACE_ERR_NOMEM;
        return 0;
}

static int folded_line_cmp(const void *a, const void *b)
{
        const struct folded_line *x = a, *y = b;
        size_t n = x->len < y->len ? x->len : y->len;
        int c = memcmp(x->text, y->text, n);
        if (c)
                return c;
        if (x->len != y->len)
                return x->len < y->len ? -1 : 1;
        return x->stack < y->stack ? -1 : x->stack > y->stack;
}

int folded_build(const struct trace_reader *r, const struct stack_counts *sc,
                 struct folded_set *out)
{
        struct folded_set fs = {0};
        struct label_cache lc = {0};
        struct frame_buf fb = {0};
        size_t *offsets = NULL;
        size_t n = 0;
        for (uint32_t s = 0; s < sc->n_stacks; s++)
                n += sc->counts[s] > 0;
        int rc = label_cache_init(&lc, r);
        if (rc < 0)
                goto out;
        fs.lines = calloc(n ? n : 1, sizeof(*fs.lines));
        offsets = calloc(n ? n : 1, sizeof(*offsets));
        fs.n_stacks = sc->n_stacks;
        fs.line_of_stack = calloc(sc->n_stacks ? sc->n_stacks : 1, sizeof(*fs.line_of_stack));
        if (!fs.lines || !offsets || !fs.line_of_stack) {
                rc = TRACE_ERR_NOMEM;
                goto out;
        }
        for (uint32_t s = 0; s < sc->n_stacks; s++) {
                if (!sc->counts[s])
                        continue;
                struct folded_line *l = &fs.lines[fs.n];
                offsets[fs.n] = fs.text.len;
                if (s == TRACE_STACK_EMPTY) {
                        if (pf_buf_append(&fs.text, FOLDED_EMPTY_LABEL,
                                          strlen(FOLDED_EMPTY_LABEL)) < 0) {
                                rc = TRACE_ERR_NOMEM;
                                goto out;
                        }
                } else {
                        int depth = frame_buf_load(&fb, r, s);
                        if (depth < 0) {
                                rc = depth;
                                goto out;
                        }
                        for (int i = 0; i < depth; i++) {
                                if (i && pf_buf_append(&fs.text, ";", 1) < 0) {
                                        rc = TRACE_ERR_NOMEM;
                                        goto out;
                                }
                                rc = label_append(&lc, r, fb.ids[i], &fs.text);
                                if (rc < 0)
                                        goto out;
                        }
                }
                l->len = fs.text.len - offsets[fs.n];
                l->stack = s;
                l->count = sc->counts[s];
                fs.n++;
        }
        /* The text buffer is final now: its addresses can be handed out. */
        for (size_t i = 0; i < fs.n; i++)
                fs.lines[i].text = (const char *)fs.text.data + offsets[i];
        qsort(fs.lines, fs.n, sizeof(*fs.lines), folded_line_cmp);
        /* Before merging, line i is the only line of stack fs.lines[i].stack. */
        size_t kept = 0;
        for (size_t i = 0; i < fs.n; i++) {
                struct folded_line *prev = kept ? &fs.lines[kept - 1] : NULL;
                uint32_t stack = fs.lines[i].stack;
                if (prev && prev->len == fs.lines[i].len &&
                    !memcmp(prev->text, fs.lines[i].text, prev->len))
                        prev->count += fs.lines[i].count;
                else
                        fs.lines[kept++] = fs.lines[i];
                fs.line_of_stack[stack] = (uint32_t)kept;
        }
        fs.n = kept;
        *out = fs;
        fs = (struct folded_set){0};
        rc = 0;
out:
        folded_free(&fs);
        label_cache_free(&lc);
        free(fb.ids);
        free(offsets);
        return rc;
}

void folded_free(struct folded_set *fs)
{
        free(fs->lines);
        free(fs->line_of_stack);
        pf_buf_free(&fs->text);
        fs->lines = NULL;
        fs->line_of_stack = NULL;
        fs->n = 0;
        fs->n_stacks = 0;
}

/* ---- hotspot tables ---- */

/* Rows of a hotspot table being built, with an index from identity to row. */
struct hot_builder {
        enum hot_key key;
        const struct trace_reader *r;
        struct hot_row *rows;
        uint64_t *hash;  /* per row */
        uint32_t *stamp; /* per row: last stack id + 1 that added to its total */
        size_t n, cap;
        uint32_t *slots;  /* open addressing: row index + 1, 0 empty */
        size_t n_slots;   /* a power of two, kept over twice n */
        uint32_t *row_of; /* per frame id: row index + 1, 0 until looked up */
        uint32_t n_frames;
};

static bool str_eq(const char *a, const char *b)
{
        return !strcmp(a ? a : "", b ? b : "");
}

static uint64_t hash_str(const char *s, uint64_t seed)
{
        s = s ? s : "";
        return pf_hash_bytes(s, strlen(s), seed);
}

static uint64_t key_hash(enum hot_key key, const struct trace_frame *f)
{
        uint64_t h = hash_str(f->file, 0);
        if (key == HOT_BY_FILE)
                return h;
        if (key == HOT_BY_LINE)
                return pf_hash_u64(h, (uint64_t)(uint32_t)f->line);
        h = pf_hash_u64(h, (uint64_t)(uint32_t)f->first_line);
        return pf_hash_u64(h, hash_str(f->function, 1));
}

static bool key_equal(enum hot_key key, const struct trace_frame *a, const struct trace_frame *b)
{
        if (!str_eq(a->file, b->file))
                return false;
        if (key == HOT_BY_FILE)
                return true;
        if (key == HOT_BY_LINE)
                return a->line == b->line;
        return a->first_line == b->first_line && str_eq(a->function, b->function);
}

static int hot_grow_slots(struct hot_builder *hb)
{
        size_t n = hb->n_slots ? hb->n_slots * 2 : 1024;
        uint32_t *slots = calloc(n, sizeof(*slots));
        if (!slots)
                return TRACE_ERR_NOMEM;
        for (size_t i = 0; i < hb->n; i++) {
                size_t j = hb->hash[i] & (n - 1);
                while (slots[j])
                        j = (j + 1) & (n - 1);
                slots[j] = (uint32_t)i + 1;
        }
        free(hb->slots);
        hb->slots = slots;
        hb->n_slots = n;
        return 0;
}

static int hot_add_row(struct hot_builder *hb, uint32_t frame, const struct trace_frame *f,
                       uint64_t h)
{
        if (hb->n == hb->cap) {
                size_t cap = hb->cap ? hb->cap * 2 : 256;
                struct hot_row *rows = reallocarray(hb->rows, cap, sizeof(*rows));
                if (rows)
                        hb->rows = rows;
                uint64_t *hash = reallocarray(hb->hash, cap, sizeof(*hash));
                if (hash)
                        hb->hash = hash;
                uint32_t *stamp = reallocarray(hb->stamp, cap, sizeof(*stamp));
                if (stamp)
                        hb->stamp = stamp;
                if (!rows || !hash || !stamp)
                        return TRACE_ERR_NOMEM;
                hb->cap = cap;
        }
        hb->rows[hb->n] = (struct hot_row){.frame = frame, .f = *f};
        hb->hash[hb->n] = h;
        hb->stamp[hb->n] = 0;
        hb->n++;
        return 0;
}

/* The row index of frame `id`, creating the row on first sight; or a negative status. */
static int64_t hot_row_of(struct hot_builder *hb, uint32_t id)
{
        if (id == 0 || id > hb->n_frames)
                return TRACE_ERR_CORRUPT;
        if (hb->row_of[id])
                return hb->row_of[id] - 1;
        struct trace_frame f;
        int rc = trace_reader_frame(hb->r, id, &f);
        if (rc < 0)
                return rc;
        if (2 * (hb->n + 1) > hb->n_slots && (rc = hot_grow_slots(hb)) < 0)
                return rc;
        uint64_t h = key_hash(hb->key, &f);
        size_t j = h & (hb->n_slots - 1);
        for (; hb->slots[j]; j = (j + 1) & (hb->n_slots - 1)) {
                struct hot_row *row = &hb->rows[hb->slots[j] - 1];
                if (hb->hash[hb->slots[j] - 1] == h && key_equal(hb->key, &row->f, &f)) {
                        /* Show the names of the lowest frame id: stable whatever the order. */
                        if (id < row->frame) {
                                row->frame = id;
                                row->f = f;
                        }
                        hb->row_of[id] = hb->slots[j];
                        return hb->slots[j] - 1;
                }
        }
        if (hb->n >= UINT32_MAX - 1)
                return TRACE_ERR_NOMEM;
        if ((rc = hot_add_row(hb, id, &f, h)) < 0)
                return rc;
        hb->slots[j] = (uint32_t)hb->n;
        hb->row_of[id] = (uint32_t)hb->n;
        return (int64_t)hb->n - 1;
}

static int cmp_str(const char *a, const char *b)
{
        return strcmp(a ? a : "", b ? b : "");
}

static int hot_row_cmp(const struct hot_row *x, const struct hot_row *y, bool by_line)
{
        if (x->self != y->self)
                return x->self > y->self ? -1 : 1;
        if (x->total != y->total)
                return x->total > y->total ? -1 : 1;
        int c = cmp_str(x->f.file, y->f.file);
        if (c)
                return c;
        int32_t lx = by_line ? x->f.line : x->f.first_line;
        int32_t ly = by_line ? y->f.line : y->f.first_line;
        if (lx != ly)
                return lx < ly ? -1 : 1;
        c = cmp_str(frame_name(&x->f), frame_name(&y->f));
        if (c)
                return c;
        return x->frame < y->frame ? -1 : x->frame > y->frame;
}

static int hot_row_cmp_line(const void *a, const void *b)
{
        return hot_row_cmp(a, b, true);
}

static int hot_row_cmp_function(const void *a, const void *b)
{
        return hot_row_cmp(a, b, false);
}

int hot_table_build(const struct trace_reader *r, const struct stack_counts *sc, enum hot_key key,
                    struct hot_table *out)
{
        struct hot_builder hb = {.key = key, .r = r, .n_frames = trace_reader_frame_count(r)};
        struct frame_buf fb = {0};
        uint64_t no_frame = 0;
        int rc = 0;
        hb.row_of = calloc((size_t)hb.n_frames + 1, sizeof(*hb.row_of));
        if (!hb.row_of) {
                rc = TRACE_ERR_NOMEM;
                goto out;
        }
        for (uint32_t s = 0; s < sc->n_stacks; s++) {
                uint64_t count = sc->counts[s];
                if (!count)
                        continue;
                if (s == TRACE_STACK_EMPTY) {
                        no_frame += count;
                        continue;
                }
                int depth = frame_buf_load(&fb, r, s);
                if (depth < 0) {
                        rc = depth;
                        goto out;
                }
                for (int i = depth - 1; i >= 0; i--) {
                        int64_t row = hot_row_of(&hb, fb.ids[i]);
                        if (row < 0) {
                                rc = (int)row;
                                goto out;
                        }
                        if (i == depth - 1)
                                hb.rows[row].self += count;
                        if (hb.stamp[row] != s + 1) {
                                hb.stamp[row] = s + 1;
                                hb.rows[row].total += count;
                        }
                }
        }
        if (hb.n) /* no row, no array: qsort must not see NULL */
                qsort(hb.rows, hb.n, sizeof(*hb.rows),
                      key == HOT_BY_LINE ? hot_row_cmp_line : hot_row_cmp_function);
        /*
         * Rows moved: renumber the frame -> row map. A row's `frame` was
         * mapped to the row's old index, which hb.stamp now records anew.
         */
        for (size_t i = 0; i < hb.n; i++)
                hb.stamp[hb.row_of[hb.rows[i].frame] - 1] = (uint32_t)i + 1;
        for (uint32_t id = 1; id <= hb.n_frames; id++)
                if (hb.row_of[id])
                        hb.row_of[id] = hb.stamp[hb.row_of[id] - 1];
        out->rows = hb.rows;
        out->n = hb.n;
        out->no_frame = no_frame;
        out->row_of_frame = hb.row_of;
        out->n_frames = hb.n_frames;
        hb.rows = NULL;
        hb.row_of = NULL;
out:
        free(hb.rows);
        free(hb.hash);
        free(hb.stamp);
        free(hb.slots);
        free(hb.row_of);
        free(fb.ids);
        return rc;
}

void hot_table_free(struct hot_table *t)
{
        free(t->rows);
        free(t->row_of_frame);
        t->rows = NULL;
        t->row_of_frame = NULL;
        t->n = 0;
        t->n_frames = 0;
}

int hot_table_count(const struct hot_table *t, const struct trace_reader *r,
                    const struct slice_entry *entries, size_t n, uint64_t *self, uint64_t *total)
{
        struct frame_buf fb = {0};
        /* Per row: the last entry index + 1 that added to its total (recursion counts once). */
        uint64_t *stamp = calloc(t->n ? t->n : 1, sizeof(*stamp));
        if (!stamp)
                return TRACE_ERR_NOMEM;
        int rc = 0;
        for (size_t e = 0; e < n && rc == 0; e++) {
                if (entries[e].stack == TRACE_STACK_EMPTY || !entries[e].count)
                        continue;
                int depth = frame_buf_load(&fb, r, entries[e].stack);
                if (depth < 0) {
                        rc = depth;
                        break;
                }
                for (int i = depth - 1; i >= 0; i--) {
                        uint32_t id = fb.ids[i];
                        /* The rows were built from these very stacks: every frame has one. */
                        if (id == 0 || id > t->n_frames || !t->row_of_frame[id]) {
                                rc = TRACE_ERR_CORRUPT;
                                break;
                        }
                        size_t row = t->row_of_frame[id] - 1;
                        if (i == depth - 1)
                                self[row] += entries[e].count;
                        if (stamp[row] != e + 1) {
                                stamp[row] = e + 1;
                                total[row] += entries[e].count;
                        }
                }
        }
        free(stamp);
        free(fb.ids);
        return rc;
}

/* ---- time slices ---- */

/*
 * Open addressing from (slice, stack) to a count while the samples stream
 * by. Consecutive samples of a thread mostly repeat the last key, so the
 * last slot found is tried first.
 */
struct slice_map {
        struct slice_entry *slots; /* count 0: empty */
        size_t mask, used;
        size_t last;
};

static uint64_t slice_key_hash(uint32_t slice, uint32_t stack)
{
        return pf_hash_u64(pf_hash_u64(0x736c696365ULL, slice), stack);
}

static int slice_map_grow(struct slice_map *m)
{
        size_t n = m->slots ? 2 * (m->mask + 1) : 4096;
        struct slice_entry *slots = calloc(n, sizeof(*slots));
        if (!slots)
                return TRACE_ERR_NOMEM;
        for (size_t i = 0; m->slots && i <= m->mask; i++) {
                if (!m->slots[i].count)
                        continue;
                size_t j = slice_key_hash(m->slots[i].slice, m->slots[i].stack) & (n - 1);
                while (slots[j].count)
                        j = (j + 1) & (n - 1);
                slots[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = slots;
        m->mask = n - 1;
        m->last = 0;
        return 0;
}

static int slice_map_add(struct slice_map *m, uint32_t slice, uint32_t stack)
{
        struct slice_entry *e = &m->slots[m->last];
        if (e->count && e->slice == slice && e->stack == stack) {
                e->count++;
                return 0;
        }
        if (2 * (m->used + 1) > m->mask + 1) {
                int rc = slice_map_grow(m);
                if (rc < 0)
                        return rc;
        }
        size_t j = slice_key_hash(slice, stack) & m->mask;
        while (m->slots[j].count && (m->slots[j].slice != slice || m->slots[j].stack != stack))
                j = (j + 1) & m->mask;
        if (!m->slots[j].count) {
                m->slots[j] = (struct slice_entry){slice, stack, 0};
                m->used++;
        }
        m->slots[j].count++;
        m->last = j;
        return 0;
}

struct slice_pass {
        struct slice_counts *sc;
        struct slice_map map;
        unsigned require, exclude;
        uint32_t n_stacks;
};

static int slice_visit(void *ctx, const struct trace_sample *s)
{
        struct slice_pass *p = ctx;
        struct slice_counts *sc = p->sc;
        int64_t rel = s->t_ns - sc->from_ns;
        uint64_t i = rel <= 0 ? 0 : (uint64_t)rel / (uint64_t)sc->slice_ns;
        uint32_t slice = i >= sc->n_slices ? sc->n_slices - 1 : (uint32_t)i;
        sc->seen[slice]++;
        if (s->state & TRACE_STATE_ON_CPU)
                sc->on_cpu[slice]++;
        if ((s->state & p->require) != p->require || (s->state & p->exclude))
                return 0;
        /* The reader checked every stack id against the stacks it loaded. */
        if (s->stack >= p->n_stacks)
                return TRACE_ERR_CORRUPT;
        sc->all.counts[s->stack]++;
        sc->all.total++;
        sc->samples[slice]++;
        return slice_map_add(&p->map, slice, s->stack);
}

static int slice_entry_cmp(const void *a, const void *b)
{
        const struct slice_entry *x = a, *y = b;
        if (x->slice != y->slice)
                return x->slice < y->slice ? -1 : 1;
        return x->stack < y->stack ? -1 : x->stack > y->stack;
}

int slice_counts_build(struct trace_reader *r, const struct trace_filter *f, int64_t from_ns,
                       int64_t slice_ns, uint32_t n_slices, struct slice_counts *out)
{
        if (n_slices < 1 || slice_ns < 1)
                return TRACE_ERR_ARG;
        struct slice_counts sc = {.from_ns = from_ns, .slice_ns = slice_ns, .n_slices = n_slices};
        struct slice_pass p = {.sc = &sc, .n_stacks = trace_reader_stack_count(r)};
        struct trace_filter all_states = f ? *f : (struct trace_filter){0};
        p.require = all_states.state_require;
        p.exclude = all_states.state_exclude;
        all_states.state_require = all_states.state_exclude = 0;
        sc.all.n_stacks = p.n_stacks;
        sc.all.counts = calloc(p.n_stacks ? p.n_stacks : 1, sizeof(*sc.all.counts));
        sc.first = calloc((size_t)n_slices + 1, sizeof(*sc.first));
        sc.samples = calloc(n_slices, sizeof(*sc.samples));
        sc.seen = calloc(n_slices, sizeof(*sc.seen));
        sc.on_cpu = calloc(n_slices, sizeof(*sc.on_cpu));
        int rc = 0;
        if (!sc.all.counts || !sc.first || !sc.samples || !sc.seen || !sc.on_cpu ||
            slice_map_grow(&p.map) < 0)
                rc = TRACE_ERR_NOMEM;
        if (rc == 0)
                rc = trace_reader_foreach_sample(r, &all_states, slice_visit, &p);
        if (rc == 0) {
                /* Compact the table into the sorted entry list. */
                size_t n = 0;
                for (size_t i = 0; i <= p.map.mask; i++)
                        if (p.map.slots[i].count)
                                p.map.slots[n++] = p.map.slots[i];
                qsort(p.map.slots, n, sizeof(*p.map.slots), slice_entry_cmp);
                sc.entries = p.map.slots;
                sc.n_entries = n;
                p.map.slots = NULL;
                size_t e = 0;
                for (uint32_t i = 0; i <= n_slices; i++) {
                        while (e < n && sc.entries[e].slice < i)
                                e++;
                        sc.first[i] = e;
                }
        }
        free(p.map.slots);
        if (rc != 0) {
                slice_counts_free(&sc);
                return rc;
        }
        *out = sc;
        return 0;
}

void slice_counts_free(struct slice_counts *sc)
{
        stack_counts_free(&sc->all);
        free(sc->entries);
        free(sc->first);
        free(sc->samples);
        free(sc->seen);
        free(sc->on_cpu);
        *sc = (struct slice_counts){0};
}
