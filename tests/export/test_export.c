/*
 * test_export.c - unit tests of the exporters (report/export.h) on the
 * fixtures of fixtures.h: the entry point's refusals, the escaping and
 * interning helpers, the merged frame tree, and the pprof export decoded by
 * the small protobuf reader below and compared with the folded counts the
 * fixtures expect, under several filters.
 *
 * `export-test --write DIR` instead writes every fixture in every format
 * (and a few filtered and icicle variants) into DIR with the expectations
 * as JSON, for check_exports.py and the real-consumer tests; the listing
 * goes to DIR/cases.json.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <zlib.h>

#include "fixtures.h"
#include "flame.h"

/* ---- running an export into memory ---- */

struct blob {
        char *data;
        size_t len;
};

static int run_export(const char *path, const struct trace_filter *f, const char *format,
                      const struct export_options *opt, struct blob *out, char *err, size_t errlen)
{
        struct trace_reader *r = NULL;
        int rc = trace_reader_open(path, &r);
        if (rc < 0)
                fail_msg("open %s: %s", path, r ? trace_reader_errmsg(r) : trace_status_str(rc));
        FILE *mem = open_memstream(&out->data, &out->len);
        assert_non_null(mem);
        rc = export_write(r, f, format, opt, mem, err, errlen);
        assert_int_equal(fclose(mem), 0);
        trace_reader_close(r);
        return rc;
}

/* ---- a small profile.proto reader ---- */

struct pp_sample {
        uint64_t loc[512];
        size_t n_loc;
        int64_t value[2];
        size_t n_value;
        int64_t label_key[8], label_str[8], label_num[8];
        size_t n_label;
};

struct pp_profile {
        char *strings[256];
        size_t n_strings;
        int64_t sample_type[2][2];
        size_t n_sample_type;
        int64_t period_type[2], period, time_nanos, duration_nanos;
        struct pp_function {
                uint64_t id;
                int64_t name, system_name, filename, start_line;
        } functions[64];
        size_t n_functions;
        struct pp_location {
                uint64_t id, function_id;
                int64_t line;
        } locations[64];
        size_t n_locations;
        struct pp_sample *samples;
        size_t n_samples;
};

struct pb_reader {
        const uint8_t *p, *end;
};

static uint64_t pb_varint(struct pb_reader *r)
{
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
                assert_true(r->p < r->end);
                uint8_t b = *r->p++;
                v |= (uint64_t)(b & 0x7f) << shift;
                if (!(b & 0x80))
                        return v;
        }
        fail_msg("varint too long");
        return 0;
}

/* Next field: returns false at the end; sets field, wire, and value or sub. */
static bool pb_next(struct pb_reader *r, unsigned *field, uint64_t *value, struct pb_reader *sub)
{
        if (r->p >= r->end)
                return false;
        uint64_t key = pb_varint(r);
        *field = (unsigned)(key >> 3);
        switch (key & 7) {
        case 0:
                *value = pb_varint(r);
                sub->p = sub->end = NULL;
                return true;
        case 2: {
                uint64_t n = pb_varint(r);
                assert_true(n <= (uint64_t)(r->end - r->p));
                sub->p = r->p;
                sub->end = r->p + n;
                r->p += n;
                *value = n;
                return true;
        }
        default:
                fail_msg("unexpected wire type %u", (unsigned)(key & 7));
                return false;
        }
}

/* A repeated scalar field, packed or not. */
static size_t pb_repeated(struct pb_reader *sub, uint64_t value, bool packed, int64_t *out,
                          size_t n, size_t cap)
{
        if (!packed) {
                assert_true(n < cap);
                out[n++] = (int64_t)value;
                return n;
        }
        while (sub->p < sub->end) {
                assert_true(n < cap);
                out[n++] = (int64_t)pb_varint(sub);
        }
        return n;
}

static void pp_decode(const struct blob *gz, struct pp_profile *pp)
{
        /* gunzip */
        size_t cap = 1 << 20, len = 0;
        uint8_t *raw = malloc(cap);
        z_stream zs = {0};
        assert_int_equal(inflateInit2(&zs, 15 + 16), Z_OK);
        zs.next_in = (Bytef *)gz->data;
        zs.avail_in = (uInt)gz->len;
        int zrc;
        do {
                if (len == cap) {
                        cap *= 2;
                        raw = realloc(raw, cap);
                }
                zs.next_out = raw + len;
                zs.avail_out = (uInt)(cap - len);
                zrc = inflate(&zs, Z_NO_FLUSH);
                len = cap - zs.avail_out;
        } while (zrc == Z_OK);
        assert_int_equal(zrc, Z_STREAM_END);
        inflateEnd(&zs);

        memset(pp, 0, sizeof(*pp));
        struct pb_reader r = {raw, raw + len}, sub, sub2, sub3;
        unsigned field, f2, f3;
        uint64_t v, v2, v3;
        size_t cap_samples = 0;
        while (pb_next(&r, &field, &v, &sub)) {
                switch (field) {
                case 1:
                case 11: {
                        int64_t vt[2] = {0, 0};
                        while (pb_next(&sub, &f2, &v2, &sub2))
                                if (f2 == 1 || f2 == 2)
                                        vt[f2 - 1] = (int64_t)v2;
                        if (field == 1) {
                                assert_true(pp->n_sample_type < 2);
                                memcpy(pp->sample_type[pp->n_sample_type++], vt, sizeof(vt));
                        } else {
                                memcpy(pp->period_type, vt, sizeof(vt));
                        }
                        break;
                }
                case 2: {
                        if (pp->n_samples == cap_samples) {
                                cap_samples = cap_samples ? cap_samples * 2 : 16;
                                pp->samples =
                                    realloc(pp->samples, cap_samples * sizeof(*pp->samples));
                        }
                        struct pp_sample *s = &pp->samples[pp->n_samples++];
                        memset(s, 0, sizeof(*s));
                        while (pb_next(&sub, &f2, &v2, &sub2)) {
                                if (f2 == 1)
                                        s->n_loc = pb_repeated(&sub2, v2, sub2.p != NULL,
                                                               (int64_t *)s->loc, s->n_loc, 512);
                                else if (f2 == 2)
                                        s->n_value = pb_repeated(&sub2, v2, sub2.p != NULL,
                                                                 s->value, s->n_value, 2);
                                else if (f2 == 3) {
                                        assert_true(s->n_label < 8);
                                        size_t k = s->n_label++;
                                        s->label_str[k] = s->label_num[k] = -1;
                                        while (pb_next(&sub2, &f3, &v3, &sub3)) {
                                                if (f3 == 1)
                                                        s->label_key[k] = (int64_t)v3;
                                                else if (f3 == 2)
                                                        s->label_str[k] = (int64_t)v3;
                                                else if (f3 == 3)
                                                        s->label_num[k] = (int64_t)v3;
                                        }
                                }
                        }
                        break;
                }
                case 4: {
                        assert_true(pp->n_locations < 64);
                        struct pp_location *l = &pp->locations[pp->n_locations++];
                        memset(l, 0, sizeof(*l));
                        int lines = 0;
                        while (pb_next(&sub, &f2, &v2, &sub2)) {
                                if (f2 == 1)
                                        l->id = v2;
                                else if (f2 == 4) {
                                        lines++;
                                        while (pb_next(&sub2, &f3, &v3, &sub3)) {
                                                if (f3 == 1)
                                                        l->function_id = v3;
                                                else if (f3 == 2)
                                                        l->line = (int64_t)v3;
                                        }
                                }
                        }
                        assert_int_equal(lines, 1);
                        break;
                }
                case 5: {
                        assert_true(pp->n_functions < 64);
                        struct pp_function *fn = &pp->functions[pp->n_functions++];
                        memset(fn, 0, sizeof(*fn));
                        while (pb_next(&sub, &f2, &v2, &sub2)) {
                                if (f2 == 1)
                                        fn->id = v2;
                                else if (f2 == 2)
                                        fn->name = (int64_t)v2;
                                else if (f2 == 3)
                                        fn->system_name = (int64_t)v2;
                                else if (f2 == 4)
                                        fn->filename = (int64_t)v2;
                                else if (f2 == 5)
                                        fn->start_line = (int64_t)v2;
                        }
                        break;
                }
                case 6:
                        assert_true(pp->n_strings < 256);
                        pp->strings[pp->n_strings] = strndup((const char *)sub.p, (size_t)v);
                        pp->n_strings++;
                        break;
                case 9:
                        pp->time_nanos = (int64_t)v;
                        break;
                case 10:
                        pp->duration_nanos = (int64_t)v;
                        break;
                case 12:
                        pp->period = (int64_t)v;
                        break;
                default:
                        break;
                }
        }
        free(raw);
        assert_true(pp->n_strings >= 1);
        assert_string_equal(pp->strings[0], "");
}

static void pp_free(struct pp_profile *pp)
{
        for (size_t i = 0; i < pp->n_strings; i++)
                free(pp->strings[i]);
        free(pp->samples);
}

static const char *pp_str(const struct pp_profile *pp, int64_t i)
{
        assert_true(i >= 0 && (size_t)i < pp->n_strings);
        return pp->strings[i];
}

static const struct pp_location *pp_location(const struct pp_profile *pp, uint64_t id)
{
        for (size_t i = 0; i < pp->n_locations; i++)
                if (pp->locations[i].id == id)
                        return &pp->locations[i];
        fail_msg("no location %llu", (unsigned long long)id);
        return NULL;
}

static const struct pp_function *pp_function(const struct pp_profile *pp, uint64_t id)
{
        for (size_t i = 0; i < pp->n_functions; i++)
                if (pp->functions[i].id == id)
                        return &pp->functions[i];
        fail_msg("no function %llu", (unsigned long long)id);
        return NULL;
}

/* The folded view's label of a location, rebuilt from the profile. */
static void pp_label(const struct pp_profile *pp, uint64_t loc_id, char *buf, size_t len)
{
        const struct pp_location *l = pp_location(pp, loc_id);
        const struct pp_function *fn = pp_function(pp, l->function_id);
        const char *name = pp_str(pp, fn->name), *file = pp_str(pp, fn->filename);
        char sys[1024];
        snprintf(sys, sizeof(sys), "%s:%s", *file ? file : "pyflame", name);
        assert_string_equal(pp_str(pp, fn->system_name), sys);
        if (!*file)
                snprintf(buf, len, "%s", name);
        else if (l->line > 0)
                snprintf(buf, len, "%s (%s:%lld)", name, file, (long long)l->line);
        else
                snprintf(buf, len, "%s (%s)", name, file);
}

struct line {
        char *text;
        uint64_t count;
};

static int line_cmp(const void *a, const void *b)
{
        return strcmp(((const struct line *)a)->text, ((const struct line *)b)->text);
}

/* Folded text of the profile, in the format of fx_folded(); checks values agree. */
static char *pp_folded(const struct pp_profile *pp)
{
        struct line *lines = calloc(pp->n_samples + 1, sizeof(*lines));
        size_t n = 0;
        char path[65536], label[1024];
        for (size_t i = 0; i < pp->n_samples; i++) {
                const struct pp_sample *s = &pp->samples[i];
                assert_int_equal(s->n_value, 2);
                assert_int_equal(s->value[1], s->value[0] * FX_PERIOD_NS);
                size_t len = 0;
                path[0] = '\0';
                for (size_t k = s->n_loc; k-- > 0;) {
                        pp_label(pp, s->loc[k], label, sizeof(label));
                        len += (size_t)snprintf(path + len, sizeof(path) - len, "%s%s",
                                                k + 1 == s->n_loc ? "" : "\x1f", label);
                        assert_true(len < sizeof(path));
                }
                size_t j = 0;
                while (j < n && strcmp(lines[j].text, path) != 0)
                        j++;
                if (j == n)
                        lines[n++].text = strdup(path);
                lines[j].count += (uint64_t)s->value[0];
        }
        qsort(lines, n, sizeof(*lines), line_cmp);
        size_t cap = 1;
        for (size_t j = 0; j < n; j++)
                cap += strlen(lines[j].text) + 32;
        char *out = malloc(cap);
        size_t len = 0;
        out[0] = '\0';
        for (size_t j = 0; j < n; j++) {
                len += (size_t)snprintf(out + len, cap - len, "%s\t%llu\n", lines[j].text,
                                        (unsigned long long)lines[j].count);
                free(lines[j].text);
        }
        free(lines);
        return out;
}

/* ---- fixtures shared by the tests ---- */

struct env {
        char *dir;
        struct fx_trace basic, deep, empty;
};

static int setup(void **state)
{
        struct env *e = calloc(1, sizeof(*e));
        e->dir = fx_mkdtemp();
        fx_build(&e->basic, "basic", e->dir);
        fx_build(&e->deep, "deep", e->dir);
        fx_build(&e->empty, "empty", e->dir);
        *state = e;
        return 0;
}

static int teardown(void **state)
{
        struct env *e = *state;
        fx_free(&e->basic);
        fx_free(&e->deep);
        fx_free(&e->empty);
        fx_rmtree(e->dir);
        free(e->dir);
        free(e);
        return 0;
}

static const char *const formats[] = {"svg", "html", "speedscope", "pprof", "chrome"};

/* ---- tests ---- */

static void test_formats_known(void **state)
{
        for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
                assert_true(export_format_known(formats[i]));
        assert_false(export_format_known("folded"));
        assert_false(export_format_known(""));
        assert_false(export_format_known(NULL));
        assert_false(export_format_known("SVG"));
}

static void test_unknown_format(void **state)
{
        struct env *e = *state;
        struct blob b = {0};
        char err[256] = "untouched";
        assert_int_equal(run_export(e->basic.path, NULL, "flamegraph", NULL, &b, err, sizeof(err)),
                         TRACE_ERR_ARG);
        assert_non_null(strstr(err, "flamegraph"));
        assert_non_null(strstr(err, EXPORT_FORMATS));
        assert_null(strchr(err, '\n'));
        assert_int_equal(b.len, 0);
        free(b.data);
}

static void test_write_error(void **state)
{
        struct env *e = *state;
        FILE *full = fopen("/dev/full", "w");
        if (!full)
                skip();
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(e->basic.path, &r), 0);
        for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
                char err[256] = "";
                assert_int_equal(export_write(r, NULL, formats[i], NULL, full, err, sizeof(err)),
                                 TRACE_ERR_IO);
                assert_non_null(strstr(err, "cannot write"));
                clearerr(full);
        }
        trace_reader_close(r);
        fclose(full);
}

static void test_every_format_every_fixture(void **state)
{
        struct env *e = *state;
        const struct fx_trace *fx[] = {&e->basic, &e->deep, &e->empty};
        for (size_t k = 0; k < 3; k++) {
                for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
                        struct blob b = {0};
                        char err[256] = "";
                        int rc =
                            run_export(fx[k]->path, NULL, formats[i], NULL, &b, err, sizeof(err));
                        if (rc != 0)
                                fail_msg("%s %s: %s", fx[k]->name, formats[i], err);
                        assert_true(b.len > 0);
                        assert_string_equal(err, "");
                        free(b.data);
                }
        }
}

/* A trace whose sample data is damaged after open's checks: every format fails, with a message. */
static void test_damaged_samples(void **state)
{
        struct env *e = *state;
        char path[4200];
        snprintf(path, sizeof(path), "%s/damaged.pyflame", e->dir);
        FILE *in = fopen(e->basic.path, "rb"), *out = fopen(path, "wb");
        assert_non_null(in);
        assert_non_null(out);
        char buf[8192];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
                assert_int_equal(fwrite(buf, 1, n, out), n);
        fclose(in);
        assert_int_equal(fclose(out), 0);
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        /* A varint that never ends, in the last chunk. */
        assert_int_equal(sqlite3_exec(db,
                                      "UPDATE sample_chunks SET data = x'ffffffff' "
                                      "WHERE id = (SELECT max(id) FROM sample_chunks)",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
        for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
                struct trace_reader *r = NULL;
                /* Open checks the tables it loads; sample chunks are read later. */
                int rc = trace_reader_open(path, &r);
                if (rc < 0)
                        fail_msg("open refused the damaged trace: %s", trace_reader_errmsg(r));
                char *data = NULL;
                size_t len = 0;
                FILE *mem = open_memstream(&data, &len);
                char err[256] = "";
                rc = export_write(r, NULL, formats[i], NULL, mem, err, sizeof(err));
                fclose(mem);
                free(data);
                trace_reader_close(r);
                if (rc >= 0)
                        fail_msg("%s exported a damaged trace", formats[i]);
                assert_non_null(strstr(err, "cannot read the trace"));
        }
}

static void check_pprof(const struct fx_trace *t, const struct trace_filter *f)
{
        struct blob b = {0};
        char err[256] = "";
        assert_int_equal(run_export(t->path, f, "pprof", NULL, &b, err, sizeof(err)), 0);
        assert_true(b.len > 18);
        assert_int_equal((uint8_t)b.data[0], 0x1f); /* gzip magic */
        assert_int_equal((uint8_t)b.data[1], 0x8b);
        struct pp_profile pp;
        pp_decode(&b, &pp);
        free(b.data);

        assert_int_equal(pp.n_sample_type, 2);
        assert_string_equal(pp_str(&pp, pp.sample_type[0][0]), "samples");
        assert_string_equal(pp_str(&pp, pp.sample_type[0][1]), "count");
        assert_string_equal(pp_str(&pp, pp.sample_type[1][0]), "cpu");
        assert_string_equal(pp_str(&pp, pp.sample_type[1][1]), "nanoseconds");
        assert_string_equal(pp_str(&pp, pp.period_type[0]), "cpu");
        assert_string_equal(pp_str(&pp, pp.period_type[1]), "nanoseconds");
        assert_int_equal(pp.period, FX_PERIOD_NS);
        int64_t from = f ? f->from_ns : 0;
        int64_t to = f && f->to_ns ? f->to_ns : t->duration_ns;
        assert_int_equal(pp.time_nanos, FX_WALL_START + from);
        assert_int_equal(pp.duration_nanos, to - from);

        char *want = fx_folded(t, f), *got = pp_folded(&pp);
        assert_string_equal(got, want);
        free(want);
        free(got);

        /* Samples are unique per (stack, labels), and every one is labelled. */
        for (size_t i = 0; i < pp.n_samples; i++) {
                const struct pp_sample *s = &pp.samples[i];
                bool state = false, gil = false, pid = false;
                for (size_t k = 0; k < s->n_label; k++) {
                        const char *key = pp_str(&pp, s->label_key[k]);
                        if (strcmp(key, "state") == 0) {
                                const char *v = pp_str(&pp, s->label_str[k]);
                                state = strcmp(v, "on-cpu") == 0 || strcmp(v, "idle") == 0;
                        } else if (strcmp(key, "gil") == 0) {
                                gil = s->label_str[k] > 0;
                        } else if (strcmp(key, "pid") == 0) {
                                pid = s->label_num[k] > 0;
                        }
                }
                assert_true(state && gil && pid);
                for (size_t j = 0; j < i; j++) {
                        const struct pp_sample *o = &pp.samples[j];
                        bool same = o->n_loc == s->n_loc && o->n_label == s->n_label &&
                                    memcmp(o->loc, s->loc, s->n_loc * sizeof(s->loc[0])) == 0 &&
                                    memcmp(o->label_str, s->label_str, sizeof(s->label_str)) == 0 &&
                                    memcmp(o->label_num, s->label_num, sizeof(s->label_num)) == 0;
                        assert_false(same);
                }
        }
        pp_free(&pp);
}

static void test_pprof_basic(void **state)
{
        struct env *e = *state;
        check_pprof(&e->basic, NULL);
}

static void test_pprof_filtered(void **state)
{
        struct env *e = *state;
        uint32_t worker = e->basic.threads[1].ref;
        struct trace_filter only_worker = {.threads = &worker, .n_threads = 1};
        check_pprof(&e->basic, &only_worker);
        struct trace_filter on_cpu = {.state_require = TRACE_STATE_ON_CPU};
        check_pprof(&e->basic, &on_cpu);
        int32_t pid = 200;
        struct trace_filter window = {
            .from_ns = 150 * FX_MS, .to_ns = 450 * FX_MS, .pids = &pid, .n_pids = 1};
        check_pprof(&e->basic, &window);
        struct trace_filter gil = {.state_require = TRACE_STATE_HOLDS_GIL,
                                   .state_exclude = TRACE_STATE_NO_GIL};
        check_pprof(&e->basic, &gil);
}

static void test_pprof_deep_and_empty(void **state)
{
        struct env *e = *state;
        check_pprof(&e->deep, NULL);
        check_pprof(&e->empty, NULL);
}

static void test_pprof_labels(void **state)
{
        struct env *e = *state;
        struct blob b = {0};
        char err[256] = "";
        uint32_t worker = e->basic.threads[1].ref;
        struct trace_filter f = {.threads = &worker, .n_threads = 1};
        assert_int_equal(run_export(e->basic.path, &f, "pprof", NULL, &b, err, sizeof(err)), 0);
        struct pp_profile pp;
        pp_decode(&b, &pp);
        free(b.data);
        /* worker: run>compute on+gil (15), on (15), empty (10), run>odd idle (10). */
        assert_int_equal(pp.n_samples, 4);
        int seen = 0;
        for (size_t i = 0; i < pp.n_samples; i++) {
                const struct pp_sample *s = &pp.samples[i];
                const char *st = "", *gil = "", *thread = "";
                int64_t tid = -1, pid = -1;
                for (size_t k = 0; k < s->n_label; k++) {
                        const char *key = pp_str(&pp, s->label_key[k]);
                        if (strcmp(key, "state") == 0)
                                st = pp_str(&pp, s->label_str[k]);
                        else if (strcmp(key, "gil") == 0)
                                gil = pp_str(&pp, s->label_str[k]);
                        else if (strcmp(key, "thread") == 0)
                                thread = pp_str(&pp, s->label_str[k]);
                        else if (strcmp(key, "tid") == 0)
                                tid = s->label_num[k];
                        else if (strcmp(key, "pid") == 0)
                                pid = s->label_num[k];
                }
                assert_string_equal(thread, "worker");
                assert_int_equal(tid, 101);
                assert_int_equal(pid, 100);
                if (s->n_loc == 2 && s->value[0] == 15 && strcmp(st, "on-cpu") == 0) {
                        seen |= strcmp(gil, "held") == 0 ? 1 : strcmp(gil, "not held") == 0 ? 2 : 0;
                } else if (s->n_loc == 1) {
                        assert_int_equal(s->value[0], 10);
                        seen |= 4;
                } else {
                        assert_int_equal(s->value[0], 10);
                        assert_string_equal(st, "idle");
                        seen |= 8;
                }
        }
        assert_int_equal(seen, 15);
        /* Locations are leaf first: the 2-frame samples end with Worker.run. */
        pp_free(&pp);
}

static void test_model_merges_by_label(void **state)
{
        struct env *e = *state;
        struct trace_reader *r = NULL;
        assert_int_equal(trace_reader_open(e->basic.path, &r), 0);
        struct ex_model m;
        char err[128];
        assert_int_equal(ex_model_load(&m, r, NULL, err, sizeof(err)), 0);
        assert_int_equal(m.total, 145);
        assert_int_equal(m.nodes[0].total, 145);
        /* MainThread's stacks at 0 ms and 600 ms, main > compute:21 whose frames differ
         * by their first line only, print the same. */
        uint32_t s0 = UINT32_MAX, s600 = UINT32_MAX;
        for (size_t i = 0; i < e->basic.n_samples; i++) {
                const struct fx_sample *fs = &e->basic.samples[i];
                if (fs->thread == 0 && fs->t_ns == 0)
                        s0 = fs->stack;
                if (fs->thread == 0 && fs->t_ns == 600 * FX_MS)
                        s600 = fs->stack;
        }
        assert_int_not_equal(s0, s600);
        assert_int_equal(ex_model_stack_node(&m, s0), ex_model_stack_node(&m, s600));
        uint32_t n = ex_model_stack_node(&m, s0);
        assert_int_equal(m.nodes[n].self, 45);
        assert_int_equal(m.nodes[n].depth, 2);
        assert_string_equal(m.labels[m.nodes[n].label].text, "compute (app/work.py:21)");
        assert_int_equal(m.nodes[m.nodes[n].parent].total, 75); /* main */
        assert_int_equal(ex_model_stack_node(&m, TRACE_STACK_EMPTY), 1);
        assert_int_equal(m.nodes[1].total, 10);
        assert_string_equal(m.labels[EX_LABEL_EMPTY].text, EX_EMPTY_LABEL);
        assert_int_equal(ex_model_stack_node(&m, m.n_stacks), UINT32_MAX);
        /* Children of the root in label order, laid out left to right. */
        const struct ex_node *root = &m.nodes[0];
        uint64_t x = 0;
        for (uint32_t i = 0; i < root->n_children; i++) {
                const struct ex_node *c = &m.nodes[m.children[root->child_first + i]];
                assert_int_equal(c->x, x);
                x += c->total;
                if (i)
                        assert_true(
                            strcmp(
                                m.labels[m.nodes[m.children[root->child_first + i - 1]].label].text,
                                m.labels[c->label].text) < 0);
        }
        assert_int_equal(x, 145);
        ex_model_free(&m);
        trace_reader_close(r);
}

/* What o holds, as a malloc'ed string; o is left empty. */
static char *out_string(struct out *o)
{
        out_write(o, "", 1);
        assert_false(o->nomem);
        char *data = (char *)o->buf.data;
        o->buf = (struct pf_buf){0};
        return data;
}

static char *out_text(void (*fn)(struct out *, const char *), const char *in)
{
        struct out o = {0};
        fn(&o, in);
        return out_string(&o);
}

static void test_escaping(void **state)
{
        char *s = out_text(out_json_embedded,
                           "a\"b\\c\n\x01</script>\xff\xc3\xa9\xe2\x80\xa8\xed\xa0\x80");
        assert_string_equal(s, "\"a\\\"b\\\\c\\n\\u0001\\u003c/script>\xef\xbf\xbd\xc3\xa9\\u2028"
                               "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
        free(s);
        s = out_text(out_xml_text, "<a href='x'>&\"\x02\xc0\xaf\xf0\x9f\x94\xa5");
        assert_string_equal(s, "&lt;a href=&#39;x&#39;&gt;&amp;&quot;\xef\xbf\xbd\xef\xbf\xbd"
                               "\xef\xbf\xbd\xf0\x9f\x94\xa5");
        free(s);
        /* A sequence cut short by the end of the string. */
        s = out_text(out_xml_text, "ab\xe2\x80");
        assert_string_equal(s, "ab\xef\xbf\xbd\xef\xbf\xbd");
        free(s);
}

static void test_us(void **state)
{
        struct out o = {0};
        ex_us(&o, 0);
        out_puts(&o, " ");
        ex_us(&o, 1234567);
        out_puts(&o, " ");
        ex_us(&o, -5);
        out_puts(&o, " ");
        ex_us(&o, INT64_MIN);
        char *data = out_string(&o);
        assert_string_equal(data, "0.000 1234.567 -0.005 -9223372036854775.808");
        free(data);
}

static void test_map(void **state)
{
        struct ex_map m = {0};
        char key[32];
        uint32_t id;
        for (int i = 0; i < 5000; i++) {
                int n = snprintf(key, sizeof(key), "key%d", i);
                assert_int_equal(ex_map_intern(&m, key, (size_t)n, &id), 1);
                assert_int_equal(id, (uint32_t)i);
        }
        for (int i = 0; i < 5000; i += 7) {
                int n = snprintf(key, sizeof(key), "key%d", i);
                assert_int_equal(ex_map_intern(&m, key, (size_t)n, &id), 0);
                assert_int_equal(id, (uint32_t)i);
                size_t len;
                const void *k = ex_map_key(&m, id, &len);
                assert_int_equal(len, (size_t)n);
                assert_memory_equal(k, key, len);
        }
        assert_int_equal(ex_map_intern(&m, "", 0, &id), 1);
        assert_int_equal(id, 5000);
        ex_map_free(&m);
}

static void test_svg_title_and_icicle(void **state)
{
        struct env *e = *state;
        struct blob b = {0};
        char err[256] = "";
        struct export_options opt = {.title = "My <title>", .icicle = true, .width = 800};
        assert_int_equal(run_export(e->basic.path, NULL, "svg", &opt, &b, err, sizeof(err)), 0);
        assert_non_null(strstr(b.data, "My &lt;title&gt;"));
        assert_non_null(strstr(b.data, "data-icicle=\"1\""));
        assert_non_null(strstr(b.data, "width=\"800\""));
        assert_non_null(strstr(b.data, "145 samples"));
        assert_null(strstr(b.data, "\xff"));
        free(b.data);
}

/* ---- --write: every export for the script checks ---- */

struct write_case {
        const char *name, *fixture, *format, *ext;
        struct export_options opt;
        int filter; /* 0 none, 1 worker thread only, 2 on-CPU only */
};

static const struct write_case write_cases[] = {
    {"basic", "basic", "svg", "svg", {.title = "basic <trace> & co"}, 0},
    {"basic-icicle", "basic", "svg", "svg", {.icicle = true}, 0},
    {"basic", "basic", "html", "html", {.title = "basic <trace> & co"}, 0},
    {"basic", "basic", "speedscope", "speedscope.json", {.title = "basic"}, 0},
    {"basic", "basic", "pprof", "pb.gz", {0}, 0},
    {"basic", "basic", "chrome", "chrome.json", {0}, 0},
    {"worker", "basic", "svg", "svg", {0}, 1},
    {"worker", "basic", "html", "html", {0}, 1},
    {"worker", "basic", "speedscope", "speedscope.json", {0}, 1},
    {"worker", "basic", "pprof", "pb.gz", {0}, 1},
    {"worker", "basic", "chrome", "chrome.json", {0}, 1},
    {"oncpu", "basic", "speedscope", "speedscope.json", {0}, 2},
    {"oncpu", "basic", "chrome", "chrome.json", {0}, 2},
    {"oncpu", "basic", "html", "html", {0}, 2},
    {"oncpu", "basic", "pprof", "pb.gz", {0}, 2},
    {"deep", "deep", "svg", "svg", {0}, 0},
    {"deep", "deep", "html", "html", {.icicle = true}, 0},
    {"deep", "deep", "speedscope", "speedscope.json", {0}, 0},
    {"deep", "deep", "pprof", "pb.gz", {0}, 0},
    {"deep", "deep", "chrome", "chrome.json", {0}, 0},
    {"empty", "empty", "svg", "svg", {0}, 0},
    {"empty", "empty", "html", "html", {0}, 0},
    {"empty", "empty", "speedscope", "speedscope.json", {0}, 0},
    {"empty", "empty", "pprof", "pb.gz", {0}, 0},
    {"empty", "empty", "chrome", "chrome.json", {0}, 0},
};

static int write_all(const char *dir)
{
        struct fx_trace fx[3];
        fx_build(&fx[0], "basic", dir);
        fx_build(&fx[1], "deep", dir);
        fx_build(&fx[2], "empty", dir);
        char path[4600];
        snprintf(path, sizeof(path), "%s/cases.json", dir);
        FILE *list = fopen(path, "w");
        if (!list) {
                perror(path);
                return 1;
        }
        fputs("[", list);
        int rc = 0;
        for (size_t i = 0; i < sizeof(write_cases) / sizeof(write_cases[0]); i++) {
                const struct write_case *c = &write_cases[i];
                struct fx_trace *t = &fx[0];
                for (int k = 0; k < 3; k++)
                        if (strcmp(fx[k].name, c->fixture) == 0)
                                t = &fx[k];
                uint32_t worker = t->threads[t->n_threads > 1 ? 1 : 0].ref;
                struct trace_filter filters[3] = {
                    {0},
                    {.threads = &worker, .n_threads = 1},
                    {.state_require = TRACE_STATE_ON_CPU},
                };
                const struct trace_filter *f = c->filter ? &filters[c->filter] : NULL;
                snprintf(path, sizeof(path), "%s/%s.%s", dir, c->name, c->ext);
                FILE *out = fopen(path, "wb");
                struct trace_reader *r = NULL;
                char err[256] = "";
                int st = out ? trace_reader_open(t->path, &r) : -1;
                if (st == 0)
                        st = export_write(r, f, c->format, &c->opt, out, err, sizeof(err));
                trace_reader_close(r);
                if (!out || fclose(out) != 0 || st != 0) {
                        fprintf(stderr, "export-test: %s: %s\n", path, err);
                        rc = 1;
                        continue;
                }
                snprintf(path, sizeof(path), "%s/%s.expected.json", dir, c->name);
                FILE *exp = fopen(path, "w");
                if (!exp) {
                        perror(path);
                        return 1;
                }
                fx_write_expected(exp, t, f);
                fclose(exp);
                fprintf(list,
                        "%s\n{\"name\":\"%s\",\"format\":\"%s\",\"file\":\"%s.%s\","
                        "\"expected\":\"%s.expected.json\",\"icicle\":%s,\"title\":",
                        i ? "," : "", c->name, c->format, c->name, c->ext, c->name,
                        c->opt.icicle ? "true" : "false");
                if (c->opt.title) {
                        fputc('"', list);
                        for (const char *p = c->opt.title; *p; p++)
                                fprintf(list, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
                        fputc('"', list);
                } else {
                        fputs("null", list);
                }
                fputs("}", list);
        }
        fputs("\n]\n", list);
        fclose(list);
        for (int k = 0; k < 3; k++)
                fx_free(&fx[k]);
        return rc;
}

int main(int argc, char **argv)
{
        if (argc == 3 && strcmp(argv[1], "--write") == 0)
                return write_all(argv[2]);
        if (argc != 1) {
                fprintf(stderr, "usage: export-test [--write DIR]\n");
                return 2;
        }
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_formats_known),
            cmocka_unit_test(test_unknown_format),
            cmocka_unit_test(test_write_error),
            cmocka_unit_test(test_every_format_every_fixture),
            cmocka_unit_test(test_damaged_samples),
            cmocka_unit_test(test_pprof_basic),
            cmocka_unit_test(test_pprof_filtered),
            cmocka_unit_test(test_pprof_deep_and_empty),
            cmocka_unit_test(test_pprof_labels),
            cmocka_unit_test(test_model_merges_by_label),
            cmocka_unit_test(test_escaping),
            cmocka_unit_test(test_us),
            cmocka_unit_test(test_map),
            cmocka_unit_test(test_svg_title_and_icicle),
        };
        return cmocka_run_group_tests_name("export", tests, setup, teardown);
}
