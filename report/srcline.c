/*
 * srcline.c - source text for the hotspot tables and the annotate view:
 * from the trace first, else from this machine.
 *
 * A trace names files as the recorded process saw them. pyflame-record
 * stores their text in the trace (libtrace's sources), which is what the
 * code was while it ran, on whatever machine the report is read. For a
 * trace without it (recorded with --no-source, an older trace, a file the
 * target's user could not read) the same path is looked up here, the usual
 * case when recording and reporting on one machine. Files are read lazily,
 * only for what is shown, each at most once, and within bounds: regular
 * files only (a trace may name a FIFO or a device), no bigger than
 * SRCLINE_MAX_FILE, no more than SRCLINE_MAX_TOTAL bytes kept over all
 * files, no file containing a NUL byte. A file that fails any of these
 * simply shows no source. A source the trace holds but cannot give back
 * (damaged) is an error of the whole report (srcline_status).
 */
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SRCLINE_MAX_FILE  (8u << 20)
#define SRCLINE_MAX_TOTAL (64u << 20)
#define SRCLINE_MAX_FILES 4096u
#define SRCLINE_MAX_WIDTH 160u /* bytes of a line shown, then "..." */

struct srcline_file {
        uint64_t hash;
        char *name;
        char *data;       /* NULL when the file is not available */
        uint32_t *starts; /* offset of each line in data */
        uint32_t n_lines;
        size_t size;
        enum srcline_origin origin;
        int64_t mtime_ns;
};

struct srcline_cache {
        struct trace_reader *r; /* NULL: this machine's files only */
        struct srcline_file *files;
        size_t n, cap;
        size_t bytes; /* data kept over all files */
        int status;   /* the first failure reading a source of the trace */
};

struct srcline_cache *srcline_cache_new(struct trace_reader *r)
{
        struct srcline_cache *c = calloc(1, sizeof(struct srcline_cache));
        if (c)
                c->r = r;
        return c;
}

int srcline_status(const struct srcline_cache *c)
{
        return c ? c->status : 0;
}

void srcline_cache_free(struct srcline_cache *c)
{
        if (!c)
                return;
        for (size_t i = 0; i < c->n; i++) {
                free(c->files[i].name);
                free(c->files[i].data);
                free(c->files[i].starts);
        }
        free(c->files);
        free(c);
}

/* Read a whole regular text file of at most `max` bytes; NULL otherwise. */
static char *read_text_file(const char *path, size_t max, size_t *size, int64_t *mtime_ns)
{
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        struct stat st;
        char *data = NULL;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
            (uint64_t)st.st_size > max)
                goto fail;
        size_t want = (size_t)st.st_size, got = 0;
        data = malloc(want + 1);
        if (!data)
                goto fail;
        /* Bounded by the size seen at open: a file growing meanwhile is cut there. */
        while (got < want) {
                ssize_t n = read(fd, data + got, want - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        if (memchr(data, '\0', got))
                goto fail;
        data[got] = '\0';
        close(fd);
        *size = got;
        *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        return data;
fail:
        free(data);
        close(fd);
        return NULL;
}

/* Index the lines of f->data; on failure the file is left unavailable. */
static void index_lines(struct srcline_file *f, size_t size)
{
        uint32_t n = 1;
        for (size_t i = 0; i < size; i++)
                n += f->data[i] == '\n';
        f->starts = malloc(n * sizeof(*f->starts));
        if (!f->starts) {
                free(f->data);
                f->data = NULL;
                return;
        }
        f->starts[0] = 0;
        uint32_t k = 1;
        for (size_t i = 0; i < size; i++)
                if (f->data[i] == '\n')
                        f->starts[k++] = (uint32_t)(i + 1);
        f->n_lines = n;
}

static struct srcline_file *lookup(struct srcline_cache *c, const char *file)
{
        uint64_t h = pf_hash_bytes(file, strlen(file), 0);
        for (size_t i = 0; i < c->n; i++)
                if (c->files[i].hash == h && !strcmp(c->files[i].name, file))
                        return &c->files[i];
        if (c->n >= SRCLINE_MAX_FILES)
                return NULL;
        if (c->n == c->cap) {
                size_t cap = c->cap ? 2 * c->cap : 16;
                struct srcline_file *p = reallocarray(c->files, cap, sizeof(*p));
                if (!p)
                        return NULL;
                c->files = p;
                c->cap = cap;
        }
        char *name = strdup(file);
        if (!name)
                return NULL;
        struct srcline_file *f = &c->files[c->n++];
        *f = (struct srcline_file){.hash = h, .name = name, .mtime_ns = -1};
        size_t size = 0;
        int rc = c->r ? trace_reader_source(c->r, file, &f->data, &size) : 0;
        if (rc < 0 && !c->status)
                c->status = rc;
        if (rc == 1) {
                f->origin = SRCLINE_TRACE;
                for (uint32_t i = 0; i < trace_reader_source_count(c->r); i++) {
                        struct trace_source s;
                        if (trace_reader_source_at(c->r, i, &s) == 0 && !strcmp(s.file, file))
                                f->mtime_ns = s.mtime_ns;
                }
                if (c->bytes + size > SRCLINE_MAX_TOTAL) {
                        free(f->data);
                        f->data = NULL;
                }
        } else if (rc == 0 && c->bytes < SRCLINE_MAX_TOTAL) {
                f->origin = SRCLINE_LOCAL;
                f->data = read_text_file(file, SRCLINE_MAX_FILE, &size, &f->mtime_ns);
        }
        if (f->data) {
                c->bytes += size;
                f->size = size;
                index_lines(f, size);
        }
        return f;
}

void srcline_text(struct srcline_cache *c, const char *file, struct srcline_text *out)
{
        *out = (struct srcline_text){.origin = SRCLINE_NONE, .mtime_ns = -1};
        struct srcline_file *f = c && file && *file ? lookup(c, file) : NULL;
        if (!f || !f->data)
                return;
        /* A last newline ends the last line; it does not start an empty one. */
        uint32_t n = f->n_lines;
        if (n > 1 && f->size && f->data[f->size - 1] == '\n')
                n--;
        *out = (struct srcline_text){f->origin, f->data, f->size, f->starts, n, f->mtime_ns};
}

bool srcline_text_line(const struct srcline_text *t, uint32_t line, const char **s, size_t *n)
{
        if (t->origin == SRCLINE_NONE || line == 0 || line > t->n_lines)
                return false;
        const char *p = t->data + t->starts[line - 1];
        const char *end = memchr(p, '\n', t->size - t->starts[line - 1]);
        *s = p;
        *n = end ? (size_t)(end - p) : t->size - t->starts[line - 1];
        return true;
}

/* Length of the UTF-8 prefix of s[0, n) that does not split a character. */
static size_t utf8_cut(const char *s, size_t n)
{
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
                n--;
        return n;
}

char *srcline_get(struct srcline_cache *c, const char *file, int32_t line)
{
        if (!c || !file || !*file || line <= 0)
                return NULL;
        struct srcline_file *f = lookup(c, file);
        if (!f || !f->data || (uint32_t)line > f->n_lines)
                return NULL;
        const char *s = f->data + f->starts[line - 1];
        const char *end = strchr(s, '\n');
        if (!end)
                end = s + strlen(s);
        while (s < end && (*s == ' ' || *s == '\t'))
                s++;
        while (end > s && ((unsigned char)end[-1] <= ' '))
                end--;
        size_t n = (size_t)(end - s);
        bool cut = n > SRCLINE_MAX_WIDTH;
        if (cut)
                n = utf8_cut(s, SRCLINE_MAX_WIDTH);
        char *out = malloc(n + 4);
        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++)
                out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? ' ' : s[i];
        memcpy(out + n, cut ? "..." : "", cut ? 4 : 1);
        return out;
}
