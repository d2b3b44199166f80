/*
 * export_pprof.c - `--format pprof`: a gzip-compressed profile.proto
 * (github.com/google/pprof/blob/main/proto/profile.proto), written by a
 * small hand-made protobuf encoder.
 *
 * What it holds:
 *   - sample_type [samples/count, cpu/nanoseconds], period_type cpu/
 *     nanoseconds and period = the sampling period (1 / rate_hz, 10 ms when
 *     unknown); a sample's cpu value is its count times the period;
 *   - one Sample per distinct (stack as printed, thread, state flags), its
 *     location_ids leaf first as profile.proto wants, with labels thread
 *     (name, when known), tid and pid (numeric), state ("on-cpu"/"idle") and
 *     gil ("held"/"not held", or "attached"/"detached" without a GIL);
 *   - one Location per frame label, with one Line {function_id, line};
 *   - one Function per (name, file, first line): name the frame's qualname
 *     (or function name), system_name "file:name", filename, start_line;
 *   - time_nanos (wall-clock start of the selection, from meta
 *     start_wall_ns) and duration_nanos; the recorded command line as a
 *     comment.
 * No Mapping is written: the frames are Python's, already symbolized.
 */
#include "flame.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* profile.proto field numbers. */
enum {
        PB_PROFILE_SAMPLE_TYPE = 1,
        PB_PROFILE_SAMPLE = 2,
        PB_PROFILE_LOCATION = 4,
        PB_PROFILE_FUNCTION = 5,
        PB_PROFILE_STRING_TABLE = 6,
        PB_PROFILE_TIME_NANOS = 9,
        PB_PROFILE_DURATION_NANOS = 10,
        PB_PROFILE_PERIOD_TYPE = 11,
        PB_PROFILE_PERIOD = 12,
        PB_PROFILE_COMMENT = 13,
        PB_VALUE_TYPE_TYPE = 1,
        PB_VALUE_TYPE_UNIT = 2,
        PB_SAMPLE_LOCATION_ID = 1,
        PB_SAMPLE_VALUE = 2,
        PB_SAMPLE_LABEL = 3,
        PB_LABEL_KEY = 1,
        PB_LABEL_STR = 2,
        PB_LABEL_NUM = 3,
        PB_LOCATION_ID = 1,
        PB_LOCATION_LINE = 4,
        PB_LINE_FUNCTION_ID = 1,
        PB_LINE_LINE = 2,
        PB_FUNCTION_ID = 1,
        PB_FUNCTION_NAME = 2,
        PB_FUNCTION_SYSTEM_NAME = 3,
        PB_FUNCTION_FILENAME = 4,
        PB_FUNCTION_START_LINE = 5,
};

enum { PB_VARINT = 0, PB_LEN = 2 };

/* A protobuf message being encoded; appends never fail visibly (see nomem). */
struct pb {
        struct pf_buf b;
        bool nomem;
};

static void pb_raw(struct pb *p, const void *data, size_t n)
{
        if (!p->nomem && pf_buf_append(&p->b, data, n) < 0)
                p->nomem = true;
}

static void pb_varint(struct pb *p, uint64_t v)
{
        uint8_t tmp[10];
        pb_raw(p, tmp, pf_varint_put(tmp, v));
}

static void pb_key(struct pb *p, unsigned field, unsigned wire)
{
        pb_varint(p, (uint64_t)field << 3 | wire);
}

/* An int64/uint64 field; zero is the default and is left out. */
static void pb_int(struct pb *p, unsigned field, int64_t v)
{
        if (v == 0)
                return;
        pb_key(p, field, PB_VARINT);
        pb_varint(p, (uint64_t)v);
}

static void pb_bytes(struct pb *p, unsigned field, const void *data, size_t n)
{
        pb_key(p, field, PB_LEN);
        pb_varint(p, n);
        pb_raw(p, data, n);
}

/* Append the finished sub-message `sub` as field `field` of `p`, and empty `sub`. */
static void pb_message(struct pb *p, unsigned field, struct pb *sub)
{
        if (sub->nomem)
                p->nomem = true;
        pb_bytes(p, field, sub->b.data, sub->b.len);
        sub->b.len = 0;
        sub->nomem = false;
}

/* The string table: strings to indexes, "" first. */
struct pb_strings {
        struct ex_map map;
        bool nomem;
};

static int64_t pb_string(struct pb_strings *s, const char *str)
{
        uint32_t id = 0;
        if (ex_map_intern(&s->map, str, strlen(str), &id) < 0)
                s->nomem = true;
        return id;
}

/* Aggregation key of a sample: (node, thread, state). */
struct pp_key {
        uint32_t node, thread, state;
};

struct pp_collect {
        struct ex_model *m;
        struct ex_map keys;
        uint64_t *counts;
        size_t cap;
        uint32_t max_ref;
        int status;
};

static int pp_sample(void *ctx, const struct trace_sample *s)
{
        struct pp_collect *c = ctx;
        uint32_t node = ex_sample_node(c->m, s, c->max_ref, &c->status);
        if (node == UINT32_MAX)
                return 1;
        struct pp_key key = {node, s->thread, s->state & TRACE_STATE_MASK};
        uint32_t id;
        if (ex_map_intern(&c->keys, &key, sizeof(key), &id) < 0)
                goto nomem;
        if (id >= c->cap) {
                size_t cap = c->cap ? c->cap * 2 : 256;
                uint64_t *p = reallocarray(c->counts, cap, sizeof(*p));
                if (!p)
                        goto nomem;
                memset(p + c->cap, 0, (cap - c->cap) * sizeof(*p));
                c->counts = p;
                c->cap = cap;
        }
        c->counts[id]++;
        return 0;
nomem:
        c->status = ex_fail(c->m, TRACE_ERR_NOMEM, "out of memory");
        return 1;
}

static void pp_value_type(struct pb *p, struct pb *sub, unsigned field, struct pb_strings *st,
                          const char *type, const char *unit)
{
        pb_int(sub, PB_VALUE_TYPE_TYPE, pb_string(st, type));
        pb_int(sub, PB_VALUE_TYPE_UNIT, pb_string(st, unit));
        pb_message(p, field, sub);
}

static void pp_label_str(struct pb *sample, struct pb *sub, struct pb_strings *st, const char *key,
                         const char *value)
{
        pb_int(sub, PB_LABEL_KEY, pb_string(st, key));
        pb_int(sub, PB_LABEL_STR, pb_string(st, value));
        pb_message(sample, PB_SAMPLE_LABEL, sub);
}

static void pp_label_num(struct pb *sample, struct pb *sub, struct pb_strings *st, const char *key,
                         int64_t value)
{
        pb_int(sub, PB_LABEL_KEY, pb_string(st, key));
        pb_key(sub, PB_LABEL_NUM, PB_VARINT); /* written even when 0: tid 0 is a value */
        pb_varint(sub, (uint64_t)value);
        pb_message(sample, PB_SAMPLE_LABEL, sub);
}

static const char *pp_gil(unsigned state)
{
        bool held = state & TRACE_STATE_HOLDS_GIL;
        if (state & TRACE_STATE_NO_GIL)
                return held ? "attached" : "detached";
        return held ? "held" : "not held";
}

/* The samples, each with its leaf-first locations and labels; marks the labels used. */
static void pp_samples(struct pb *prof, struct pb_strings *st, const struct ex_model *m,
                       const struct pp_collect *c, const uint32_t *index, uint64_t period,
                       uint32_t *path, bool *label_used)
{
        struct pb sample = {0}, sub = {0}, packed = {0};
        for (uint32_t id = 0; id < c->keys.n; id++) {
                size_t len;
                struct pp_key key;
                memcpy(&key, ex_map_key(&c->keys, id, &len), sizeof(key));
                uint32_t depth = ex_model_path(m, key.node, path);
                for (uint32_t d = depth; d-- > 0;) {
                        uint32_t label = m->nodes[path[d]].label;
                        label_used[label] = true;
                        pb_varint(&packed, (uint64_t)label + 1);
                }
                pb_message(&sample, PB_SAMPLE_LOCATION_ID, &packed);
                pb_varint(&packed, c->counts[id]);
                pb_varint(&packed, c->counts[id] * period);
                pb_message(&sample, PB_SAMPLE_VALUE, &packed);
                struct trace_thread t;
                if (index[key.thread] != UINT32_MAX &&
                    trace_reader_thread_at(m->r, index[key.thread], &t) == 0) {
                        if (t.name && *t.name)
                                pp_label_str(&sample, &sub, st, "thread", t.name);
                        if (t.tid >= 0)
                                pp_label_num(&sample, &sub, st, "tid", t.tid);
                        pp_label_num(&sample, &sub, st, "pid", t.pid);
                }
                pp_label_str(&sample, &sub, st, "state",
                             key.state & TRACE_STATE_ON_CPU ? "on-cpu" : "idle");
                pp_label_str(&sample, &sub, st, "gil", pp_gil(key.state));
                pb_message(prof, PB_PROFILE_SAMPLE, &sample);
        }
        pf_buf_free(&sample.b);
        pf_buf_free(&sub.b);
        pf_buf_free(&packed.b);
        if (sample.nomem || sub.nomem || packed.nomem)
                prof->nomem = true;
}

/* Locations (one per label used) and their functions. */
static void pp_locations(struct pb *prof, struct pb_strings *st, const struct ex_model *m,
                         const bool *label_used)
{
        struct ex_map functions = {0};
        struct pb loc = {0}, line = {0}, fn = {0};
        struct pf_buf key = {0}, sys = {0};
        for (uint32_t i = 0; i < m->n_labels; i++) {
                if (!label_used[i])
                        continue;
                const struct ex_label *l = &m->labels[i];
                const char *name = i == EX_LABEL_EMPTY ? EX_EMPTY_LABEL : l->name;
                key.len = 0;
                if (pf_buf_append(&key, name, strlen(name) + 1) < 0 ||
                    pf_buf_append(&key, l->file, strlen(l->file) + 1) < 0 ||
                    pf_buf_append(&key, &l->first_line, sizeof(l->first_line)) < 0) {
                        prof->nomem = true;
                        break;
                }
                uint32_t fid;
                int added = ex_map_intern(&functions, key.data, key.len, &fid);
                if (added < 0) {
                        prof->nomem = true;
                        break;
                }
                if (added) {
                        /* "file:name" ("pyflame:name" for pseudo frames). A system_name equal
                         * to name would let pprof "demangle" it, which empties Python's
                         * "<module>" or "<lambda>" as if they were C++ template arguments. */
                        sys.len = 0;
                        const char *prefix = *l->file ? l->file : "pyflame";
                        if (pf_buf_append(&sys, prefix, strlen(prefix)) < 0 ||
                            pf_buf_append(&sys, ":", 1) < 0 ||
                            pf_buf_append(&sys, name, strlen(name) + 1) < 0) {
                                prof->nomem = true;
                                break;
                        }
                        pb_int(&fn, PB_FUNCTION_ID, (int64_t)fid + 1);
                        pb_int(&fn, PB_FUNCTION_NAME, pb_string(st, name));
                        pb_int(&fn, PB_FUNCTION_SYSTEM_NAME, pb_string(st, (const char *)sys.data));
                        pb_int(&fn, PB_FUNCTION_FILENAME, pb_string(st, l->file));
                        pb_int(&fn, PB_FUNCTION_START_LINE, l->first_line > 0 ? l->first_line : 0);
                        pb_message(prof, PB_PROFILE_FUNCTION, &fn);
                }
                pb_int(&line, PB_LINE_FUNCTION_ID, (int64_t)fid + 1);
                pb_int(&line, PB_LINE_LINE, l->line > 0 ? l->line : 0);
                pb_int(&loc, PB_LOCATION_ID, (int64_t)i + 1);
                pb_message(&loc, PB_LOCATION_LINE, &line);
                pb_message(prof, PB_PROFILE_LOCATION, &loc);
        }
        if (loc.nomem || line.nomem || fn.nomem)
                prof->nomem = true;
        pf_buf_free(&loc.b);
        pf_buf_free(&line.b);
        pf_buf_free(&fn.b);
        pf_buf_free(&key);
        pf_buf_free(&sys);
        ex_map_free(&functions);
}

/* The string table, last, once every string is known; cleaned to UTF-8. */
static void pp_string_table(struct pb *prof, struct pb_strings *st)
{
        struct pf_buf clean = {0}, cstr = {0};
        for (uint32_t i = 0; i < st->map.n; i++) {
                size_t len;
                const char *s = ex_map_key(&st->map, i, &len);
                clean.len = cstr.len = 0;
                if (pf_buf_append(&cstr, s, len) < 0 || pf_buf_append(&cstr, "", 1) < 0 ||
                    ex_utf8_clean(&clean, (const char *)cstr.data) < 0) {
                        prof->nomem = true;
                        break;
                }
                pb_bytes(prof, PB_PROFILE_STRING_TABLE, clean.data, clean.len);
        }
        pf_buf_free(&clean);
        pf_buf_free(&cstr);
}

static int pp_gzip(struct ex_model *m, const struct pf_buf *in, struct out *o)
{
        z_stream zs = {0};
        if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
                return ex_fail(m, TRACE_ERR_NOMEM, "cannot start gzip compression");
        unsigned char chunk[65536];
        const uint8_t *p = in->data;
        size_t left = in->len;
        int zrc;
        do {
                uInt take = left > (1u << 30) ? (1u << 30) : (uInt)left;
                zs.next_in = (Bytef *)(uintptr_t)p;
                zs.avail_in = take;
                int flush = left == take ? Z_FINISH : Z_NO_FLUSH;
                do {
                        zs.next_out = chunk;
                        zs.avail_out = sizeof(chunk);
                        zrc = deflate(&zs, flush);
                        if (zrc == Z_STREAM_ERROR)
                                break;
                        out_write(o, chunk, sizeof(chunk) - zs.avail_out);
                } while (zs.avail_out == 0);
                p += take;
                left -= take;
        } while (left > 0 && zrc != Z_STREAM_ERROR);
        deflateEnd(&zs);
        if (zrc != Z_STREAM_END)
                return ex_fail(m, TRACE_ERR_NOMEM, "gzip compression failed");
        return 0;
}

int export_pprof(struct ex_model *m, const struct trace_filter *filter,
                 const struct export_options *opt, struct out *o)
{
        uint32_t max_ref = 0, max_depth = 0;
        uint32_t *index = ex_thread_index(m, &max_ref);
        struct pp_collect c = {.m = m, .max_ref = max_ref};
        for (uint32_t n = 0; n < m->n_nodes; n++)
                if (m->nodes[n].depth > max_depth)
                        max_depth = m->nodes[n].depth;
        uint32_t *path = malloc(((size_t)max_depth + 1) * sizeof(*path));
        bool *label_used = calloc((size_t)m->n_labels + 1, sizeof(*label_used));
        struct pb prof = {0}, sub = {0};
        struct pb_strings st = {0};
        int rc = 0;
        if (!index || !path || !label_used)
                rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        if (rc == 0) {
                int s = trace_reader_foreach_sample(m->r, filter, pp_sample, &c);
                if (s < 0)
                        rc = ex_fail_read(m, s);
                else if (c.status < 0)
                        rc = c.status;
        }
        if (rc == 0) {
                uint64_t period = (uint64_t)llround(m->period_ns);
                pb_string(&st, "");
                pp_value_type(&prof, &sub, PB_PROFILE_SAMPLE_TYPE, &st, "samples", "count");
                pp_value_type(&prof, &sub, PB_PROFILE_SAMPLE_TYPE, &st, "cpu", "nanoseconds");
                pp_samples(&prof, &st, m, &c, index, period, path, label_used);
                pp_locations(&prof, &st, m, label_used);
                const char *wall = trace_reader_meta(m->r, TRACE_META_START_WALL_NS);
                long long start = wall ? strtoll(wall, NULL, 10) : 0;
                if (start > 0)
                        pb_int(&prof, PB_PROFILE_TIME_NANOS, start + m->from_ns);
                if (m->to_ns > m->from_ns)
                        pb_int(&prof, PB_PROFILE_DURATION_NANOS, m->to_ns - m->from_ns);
                pp_value_type(&prof, &sub, PB_PROFILE_PERIOD_TYPE, &st, "cpu", "nanoseconds");
                pb_int(&prof, PB_PROFILE_PERIOD, (int64_t)period);
                const char *cmdline = trace_reader_meta(m->r, TRACE_META_CMDLINE);
                if (cmdline && *cmdline) {
                        pb_key(&prof, PB_PROFILE_COMMENT, PB_VARINT);
                        pb_varint(&prof, (uint64_t)pb_string(&st, cmdline));
                }
                if (opt->title && *opt->title) {
                        pb_key(&prof, PB_PROFILE_COMMENT, PB_VARINT);
                        pb_varint(&prof, (uint64_t)pb_string(&st, opt->title));
                }
                pp_string_table(&prof, &st);
                if (prof.nomem || sub.nomem || st.nomem)
                        rc = ex_fail(m, TRACE_ERR_NOMEM, "out of memory");
        }
        if (rc == 0)
                rc = pp_gzip(m, &prof.b, o);
        pf_buf_free(&prof.b);
        pf_buf_free(&sub.b);
        ex_map_free(&st.map);
        ex_map_free(&c.keys);
        free(c.counts);
        free(index);
        free(path);
        free(label_used);
        return rc;
}
