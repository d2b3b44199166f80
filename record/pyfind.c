/*
 * pyfind.c - find the CPython interpreter inside a running process.
 *
 * Steps, each of which can fail with its own enum pyfind_status:
 *  1. Group the file-backed lines of /proc/PID/maps by file (path + inode).
 *  2. Pick the ELF that holds the interpreter: libpython*.so* first, then the
 *     executable, then any other mapped ELF; the first that defines
 *     _PyRuntime, Py_Version, PyCode_Type, _PyThreadState_Current or
 *     interp_head (in .dynsym or .symtab), or has a .PyRuntime section, wins.
 *     Files are opened as /proc/PID/root/<path> (the target's mount namespace)
 *     and must be the very inode that is mapped; otherwise, or when deleted,
 *     through /proc/PID/map_files/ or /proc/PID/exe.
 *  3. Load bias: pair a mapping at file offset O with the PT_LOAD whose
 *     page-aligned p_offset is O: bias = start - page_align_down(p_vaddr).
 *     The candidate that explains most of the file's mappings wins (never
 *     "the first executable mapping", which -z separate-code breaks).
 *  4. The exact version from Py_Version, _Py_DebugOffsets, the string
 *     Py_GetVersion() left in the target's memory, or the PY_VERSION literal
 *     in .rodata, each checked against what the symbols say about the era
 *     (e.g. _PyRuntime means 3.7+); the file name only as a last resort.
 *
 * Everything read from the target or its files is untrusted: symbol counts,
 * section sizes and scans are bounded, and strings are parsed with lengths.
 */
#include "pyfind.h"
#include "pylayout.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procfs.h"

/* Bounds on untrusted input. */
#define MAX_OBJECTS      4096 /* distinct mapped files considered */
#define MAX_OBJ_MAPS     32   /* mappings remembered per file */
#define MAX_LOADS        32   /* PT_LOAD headers per ELF */
#define MAX_SYMBOLS      (1u << 24)
#define MAX_SCAN_BYTES   (32u << 20) /* of .data/.bss scanned for the version string */
#define MAX_RODATA_BYTES (64u << 20)
#define SCAN_CHUNK       (64u << 10)
#define VERSION_TEXT_MAX 400  /* Py_GetVersion() is at most 250 (3.12+: 300) bytes */
#define OBJ_HASH_SLOTS   8192 /* > 2 * MAX_OBJECTS */

/* One mapped file, as grouped from /proc/PID/maps. */
struct obj_map {
        uint64_t start, end, offset;
};

struct object {
        char *path; /* as the target maps it, without " (deleted)" */
        bool deleted;
        uint64_t inode;
        unsigned dev_major, dev_minor;
        struct obj_map maps[MAX_OBJ_MAPS];
        size_t n_maps;
};

/* The symbols we look for. Index into a lookup table; order does not matter. */
enum sym_id {
        SYM_RUNTIME,
        SYM_INTERP_HEAD,
        SYM_TSTATE_CURRENT,
        SYM_GIL_LOCKED,
        SYM_GIL_LAST_HOLDER,
        SYM_CODE_TYPE,
        SYM_UNICODE_TYPE,
        SYM_STRING_TYPE,
        SYM_PY_VERSION,
        SYM_REF_TOTAL,
        SYM_NEGATIVE_REFCOUNT,
        N_SYMS
};

static const char *const sym_names[N_SYMS] = {
    [SYM_RUNTIME] = "_PyRuntime",
    [SYM_INTERP_HEAD] = "interp_head",
    [SYM_TSTATE_CURRENT] = "_PyThreadState_Current",
    [SYM_GIL_LOCKED] = "gil_locked",
    [SYM_GIL_LAST_HOLDER] = "gil_last_holder",
    [SYM_CODE_TYPE] = "PyCode_Type",
    [SYM_UNICODE_TYPE] = "PyUnicode_Type",
    [SYM_STRING_TYPE] = "PyString_Type",
    [SYM_PY_VERSION] = "Py_Version",
    [SYM_REF_TOTAL] = "_Py_RefTotal",
    [SYM_NEGATIVE_REFCOUNT] = "_Py_NegativeRefcount",
};

struct symval {
        bool found;
        uint64_t value, size;
};

struct section {
        bool found;
        uint64_t addr, size, offset;
        bool nobits;
};

/* What we learnt from one ELF file. */
struct elf_obj {
        int fd;
        Elf *elf;
        int elf_class;
        uint16_t type, machine;
        GElf_Phdr loads[MAX_LOADS];
        size_t n_loads;
        bool has_interp; /* PT_INTERP: dynamically linked executable */
        struct section pyruntime, data, bss, rodata;
        struct symval syms[N_SYMS];
        struct symval version_buf; /* Py_GetVersion()'s static buffer, LOCAL in .symtab */
        bool needs_libpython;      /* a DT_NEEDED entry names libpython */
        char needed_libpython[64];
};

/* The state of one pyfind_target() call. */
struct finder {
        pid_t pid;
        char comm[64];
        char exe[PATH_MAX];  /* readlink of /proc/PID/exe, without " (deleted)" */
        struct object *objs; /* grown on demand up to MAX_OBJECTS */
        size_t n_objs, cap_objs;
        int32_t hash[OBJ_HASH_SLOTS]; /* index+1 into objs, 0 = empty */
        bool libc_mapped;
        char *err;
        size_t errlen;
        long page;
};

static int fail(struct finder *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct finder *f, int code, const char *fmt, ...)
{
        if (f->err && f->errlen) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(f->err, f->errlen, fmt, ap);
                va_end(ap);
        }
        return code;
}

static int fail_permission(struct finder *f, const char *what)
{
        return fail(f, PYFIND_PERMISSION,
                    "cannot read %s of process %d (%s): permission denied; run as root or with "
                    "CAP_SYS_PTRACE (sudo, or setcap cap_sys_ptrace+ep), check "
                    "kernel.yama.ptrace_scope (1 allows only descendants, 0 any own process), "
                    "and in Docker add --cap-add SYS_PTRACE",
                    what, (int)f->pid, f->comm);
}

static const char *base_name(const char *path)
{
        const char *s = strrchr(path, '/');
        return s ? s + 1 : path;
}

/* --- Version strings ---------------------------------------------------------------------- */

static int parse_small_int(const char *s, size_t len, size_t *i, int max_digits)
{
        int v = 0, n = 0;
        while (*i < len && n < max_digits && isdigit((unsigned char)s[*i])) {
                v = v * 10 + (s[*i] - '0');
                (*i)++;
                n++;
        }
        if (n == 0 || (*i < len && isdigit((unsigned char)s[*i])))
                return -1;
        return v;
}

/*
 * Parse a version number "X.Y.Z[{a,b,c,rc}N][+local]" at the start of s.
 * Returns the bytes consumed and sets *hex (PY_VERSION_HEX), or 0 when s does
 * not start with one. Only majors 2 and 3 are recognised.
 */
size_t pyfind_parse_version(const char *s, size_t len, uint32_t *hex)
{
        size_t i = 0;
        if (len < 5 || (s[0] != '2' && s[0] != '3') || s[1] != '.')
                return 0;
        int major = s[0] - '0';
        i = 2;
        int minor = parse_small_int(s, len, &i, 2);
        if (minor < 0 || i >= len || s[i] != '.')
                return 0;
        i++;
        int micro = parse_small_int(s, len, &i, 2);
        if (micro < 0)
                return 0;
        unsigned level = 0xF, serial = 0;
        if (i < len && (s[i] == 'a' || s[i] == 'b' || s[i] == 'c' || s[i] == 'r')) {
                if (s[i] == 'a')
                        level = 0xA;
                else if (s[i] == 'b')
                        level = 0xB;
                else
                        level = 0xC;
                i++;
                if (s[i - 1] == 'r') {
                        if (i >= len || s[i] != 'c')
                                return 0;
                        i++;
                }
                int ser = parse_small_int(s, len, &i, 2);
                if (ser < 0 || ser > 15)
                        return 0;
                serial = (unsigned)ser;
        }
        if (i < len && s[i] == '+') {
                /* A local/dev marker, e.g. "3.13.0+" or "3.8.0+cinder". */
                i++;
                size_t n = 0;
                while (
                    i < len && n < 32 &&
                    (isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '-' || s[i] == '_')) {
                        i++;
                        n++;
                }
        }
        *hex = (uint32_t)major << 24 | (uint32_t)minor << 16 | (uint32_t)micro << 8 | level << 4 |
               serial;
        return i;
}

/*
 * Whether s[0..len) starting at a version number is the text Py_GetVersion()
 * builds, "3.9.18 (main, Jan  1 2024, 00:00:00) \n[GCC 12.2.0]": the number,
 * " (", then printable text with a ')' up to a NUL, all within
 * VERSION_TEXT_MAX bytes.
 */
static bool is_version_text(const char *s, size_t len, uint32_t *hex)
{
        size_t i = pyfind_parse_version(s, len, hex);
        if (i == 0 || i + 2 > len || s[i] != ' ' || s[i + 1] != '(')
                return false;
        bool paren = false;
        for (size_t k = i + 2; k < len && k < VERSION_TEXT_MAX; k++) {
                unsigned char c = (unsigned char)s[k];
                if (c == 0)
                        return paren && k > i + 4;
                if (c == ')')
                        paren = true;
                else if (c != '\n' && c != '\t' && (c < 0x20 || c > 0x7e))
                        return false;
        }
        return false;
}

/* The range of (major << 8 | minor) that the symbols allow. */
struct era {
        unsigned lo, hi;
};

static const struct era any_era = {0x0200, 0x03ff};

static bool era_allows(struct era r, uint32_t hex)
{
        unsigned mm = hex >> 16;
        return mm >= r.lo && mm <= r.hi;
}

/*
 * Find Py_GetVersion()'s text, of a version the era allows, in a block of the
 * target's data. Prefers a match that starts a string (preceded by a NUL or
 * at the start), as the static buffer does. Returns 0 and sets *hex, or
 * -ENOENT.
 */
static int find_version_text(const char *buf, size_t len, struct era era, uint32_t *hex)
{
        bool have_any = false;
        uint32_t any = 0;
        for (size_t i = 0; i + 5 < len; i++) {
                if ((buf[i] != '2' && buf[i] != '3') || buf[i + 1] != '.')
                        continue;
                uint32_t v;
                if (!is_version_text(buf + i, len - i, &v) || !era_allows(era, v))
                        continue;
                if (i == 0 || buf[i - 1] == 0) {
                        *hex = v;
                        return 0;
                }
                if (!have_any) {
                        have_any = true;
                        any = v;
                }
        }
        if (!have_any)
                return -ENOENT;
        *hex = any;
        return 0;
}

/* find_version_text() for any version. */
int pyfind_scan_version_string(const char *buf, size_t len, uint32_t *hex)
{
        return find_version_text(buf, len, any_era, hex);
}

/*
 * Parse a file name like "libpython3.13t.so.1.0", "libpython3.6m.so",
 * "python3.11" or "python2.7-dbg" into major, minor and ABI flags ("t", "d",
 * "m", ...). Returns false when the name is not of that shape.
 */
bool pyfind_parse_python_name(const char *base, int *major, int *minor, char *flags,
                              size_t flagslen, bool *is_lib)
{
        const char *p = base;
        bool lib = strncmp(p, "libpython", 9) == 0;
        if (lib)
                p += 9;
        else if (strncmp(p, "python", 6) == 0)
                p += 6;
        else
                return false;
        if ((p[0] != '2' && p[0] != '3') || p[1] != '.' || !isdigit((unsigned char)p[2]))
                return false;
        int ma = p[0] - '0', mi = 0;
        size_t i = 2, len = strlen(p);
        mi = parse_small_int(p, len, &i, 2);
        if (mi < 0)
                return false;
        size_t nf = 0;
        while (i < len && strchr("dmtu", p[i]) && nf + 1 < flagslen && nf < 4)
                flags[nf++] = p[i++];
        if (flagslen)
                flags[nf] = 0;
        if (lib && strncmp(p + i, ".so", 3) != 0)
                return false;
        if (!lib && p[i] != 0 && p[i] != '-' && p[i] != '.')
                return false;
        *major = ma;
        *minor = mi;
        *is_lib = lib;
        return true;
}

static bool is_libpython_name(const char *path)
{
        int ma, mi;
        char fl[8];
        bool lib;
        return pyfind_parse_python_name(base_name(path), &ma, &mi, fl, sizeof(fl), &lib) && lib;
}

/* --- /proc/PID/maps --------------------------------------------------------------------- */

static uint32_t hash_path(const char *s, uint64_t inode)
{
        uint64_t h = 1469598103934665603ull ^ inode;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return (uint32_t)(h ^ (h >> 29));
}

static int collect_mapping(void *ctx, const struct procfs_mapping *m)
{
        struct finder *f = ctx;
        if (m->inode == 0 || m->path[0] != '/')
                return 0;
        const char *b = base_name(m->path);
        if (strncmp(b, "libc.so", 7) == 0 || strncmp(b, "libc-", 5) == 0 ||
            strncmp(b, "ld-musl", 7) == 0)
                f->libc_mapped = true;

        uint32_t h = hash_path(m->path, m->inode) % OBJ_HASH_SLOTS;
        for (size_t probe = 0; probe < OBJ_HASH_SLOTS; probe++) {
                int32_t slot = f->hash[h];
                if (slot == 0)
                        break;
                struct object *o = &f->objs[slot - 1];
                if (o->inode == m->inode && o->dev_major == m->dev_major &&
                    o->dev_minor == m->dev_minor && strcmp(o->path, m->path) == 0) {
                        if (o->n_maps < MAX_OBJ_MAPS)
                                o->maps[o->n_maps++] =
                                    (struct obj_map){m->start, m->end, m->offset};
                        return 0;
                }
                h = (h + 1) % OBJ_HASH_SLOTS;
        }
        if (f->n_objs >= MAX_OBJECTS || f->hash[h] != 0)
                return 0; /* bounded: ignore further files */
        if (f->n_objs == f->cap_objs) {
                size_t cap = f->cap_objs ? 2 * f->cap_objs : 64;
                struct object *objs = realloc(f->objs, cap * sizeof(*objs));
                if (!objs)
                        return -ENOMEM;
                f->objs = objs;
                f->cap_objs = cap;
        }
        char *path = strdup(m->path);
        if (!path)
                return -ENOMEM;
        struct object *o = &f->objs[f->n_objs];
        memset(o, 0, sizeof(*o));
        o->path = path;
        o->deleted = m->deleted;
        o->inode = m->inode;
        o->dev_major = m->dev_major;
        o->dev_minor = m->dev_minor;
        o->maps[0] = (struct obj_map){m->start, m->end, m->offset};
        o->n_maps = 1;
        f->n_objs++;
        f->hash[h] = (int32_t)f->n_objs;
        return 0;
}

static void free_objects(struct finder *f)
{
        for (size_t i = 0; i < f->n_objs; i++)
                free(f->objs[i].path);
        free(f->objs);
        f->objs = NULL;
        f->n_objs = f->cap_objs = 0;
}

/* A finder over the files process pid maps (collect_mapping); NULL: out of memory. */
static struct finder *finder_new(pid_t pid)
{
        struct finder *f = calloc(1, sizeof(*f));
        if (!f)
                return NULL;
        f->pid = pid;
        f->page = sysconf(_SC_PAGESIZE);
        if (f->page <= 0)
                f->page = 4096;
        return f;
}

static bool is_exe(const struct finder *f, const struct object *o)
{
        return f->exe[0] && strcmp(f->exe, o->path) == 0;
}

/* --- ELF files ---------------------------------------------------------------------------- */

/* Open path if it is a regular file with the given inode (0: any). */
static int open_regular(const char *path, uint64_t inode)
{
        struct stat st;
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
                return -1;
        if (inode && (uint64_t)st.st_ino != inode)
                return -1;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return -1;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (inode && (uint64_t)st.st_ino != inode)) {
                close(fd);
                return -1;
        }
        return fd;
}

/*
 * Open the mapped file itself: through the target's root when the path still
 * names the mapped inode, else through map_files or exe (deleted or replaced
 * files). As a last resort, the path even if its inode differs (overlay file
 * systems can report other inode numbers). Returns an fd or -1.
 */
static int open_object(const struct finder *f, const struct object *o)
{
        char path[PATH_MAX + 64];
        int fd;
        if (!o->deleted) {
                snprintf(path, sizeof(path), "/proc/%d/root%s", (int)f->pid, o->path);
                if ((fd = open_regular(path, o->inode)) >= 0)
                        return fd;
        }
        for (size_t i = 0; i < o->n_maps; i++) {
                snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", (int)f->pid,
                         (unsigned long long)o->maps[i].start, (unsigned long long)o->maps[i].end);
                if ((fd = open_regular(path, 0)) >= 0)
                        return fd;
        }
        if (is_exe(f, o)) {
                snprintf(path, sizeof(path), "/proc/%d/exe", (int)f->pid);
                if ((fd = open_regular(path, 0)) >= 0)
                        return fd;
        }
        if (!o->deleted) {
                snprintf(path, sizeof(path), "/proc/%d/root%s", (int)f->pid, o->path);
                return open_regular(path, 0);
        }
        return -1;
}

static void elf_close(struct elf_obj *e)
{
        if (e->elf)
                elf_end(e->elf);
        if (e->fd >= 0)
                close(e->fd);
        e->elf = NULL;
        e->fd = -1;
}

static void note_section(struct section *s, const GElf_Shdr *sh)
{
        if (s->found)
                return;
        s->found = true;
        s->addr = sh->sh_addr;
        s->size = sh->sh_size;
        s->offset = sh->sh_offset;
        s->nobits = sh->sh_type == SHT_NOBITS;
}

/* "version" or "version.<digits>": the static buffer of Py_GetVersion(). */
static bool is_version_buffer_name(const char *n)
{
        if (strncmp(n, "version", 7) != 0)
                return false;
        n += 7;
        if (*n == 0)
                return true;
        if (*n++ != '.' || !*n)
                return false;
        for (; *n; n++)
                if (!isdigit((unsigned char)*n))
                        return false;
        return true;
}

static void scan_symbols(struct elf_obj *e, Elf_Scn *scn, const GElf_Shdr *sh, bool is_symtab)
{
        Elf_Data *d = elf_getdata(scn, NULL);
        if (!d || sh->sh_entsize == 0)
                return;
        size_t n = d->d_size / sh->sh_entsize;
        if (n > MAX_SYMBOLS)
                n = MAX_SYMBOLS;
        for (size_t i = 1; i < n; i++) {
                GElf_Sym s;
                if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF || s.st_name == 0)
                        continue;
                const char *name = elf_strptr(e->elf, sh->sh_link, s.st_name);
                if (!name)
                        continue;
                char c = name[0];
                if (c != '_' && c != 'P' && c != 'i' && c != 'g' && c != 'v')
                        continue;
                if (is_symtab && c == 'v' && GELF_ST_TYPE(s.st_info) == STT_OBJECT &&
                    !e->version_buf.found && s.st_size >= 100 && s.st_size <= 1024 &&
                    is_version_buffer_name(name)) {
                        e->version_buf = (struct symval){true, s.st_value, s.st_size};
                        continue;
                }
                for (int k = 0; k < N_SYMS; k++) {
                        if (!e->syms[k].found && strcmp(name, sym_names[k]) == 0) {
                                e->syms[k] = (struct symval){true, s.st_value, s.st_size};
                                break;
                        }
                }
        }
}

static void scan_dynamic(struct elf_obj *e, Elf_Scn *scn, const GElf_Shdr *sh)
{
        Elf_Data *d = elf_getdata(scn, NULL);
        if (!d || sh->sh_entsize == 0)
                return;
        size_t n = d->d_size / sh->sh_entsize;
        if (n > 65536)
                n = 65536;
        for (size_t i = 0; i < n; i++) {
                GElf_Dyn dyn;
                if (!gelf_getdyn(d, (int)i, &dyn) || dyn.d_tag == DT_NULL)
                        break;
                if (dyn.d_tag != DT_NEEDED)
                        continue;
                const char *name = elf_strptr(e->elf, sh->sh_link, dyn.d_un.d_val);
                if (name && is_libpython_name(name) && !e->needs_libpython) {
                        e->needs_libpython = true;
                        snprintf(e->needed_libpython, sizeof(e->needed_libpython), "%s", name);
                }
        }
}

/*
 * Read the headers, sections and symbols we need from an open file. Returns 0,
 * or -1 when it is not an ELF file libelf can parse (e keeps the fd to close).
 */
static int elf_load(struct elf_obj *e)
{
        unsigned char ident[EI_NIDENT];
        if (pread(e->fd, ident, sizeof(ident), 0) != (ssize_t)sizeof(ident) ||
            memcmp(ident, ELFMAG, SELFMAG) != 0)
                return -1;
        e->elf = elf_begin(e->fd, ELF_C_READ_MMAP, NULL);
        if (!e->elf || elf_kind(e->elf) != ELF_K_ELF)
                return -1;
        GElf_Ehdr eh;
        if (!gelf_getehdr(e->elf, &eh))
                return -1;
        e->elf_class = gelf_getclass(e->elf);
        e->type = eh.e_type;
        e->machine = eh.e_machine;

        size_t nph;
        if (elf_getphdrnum(e->elf, &nph) != 0)
                return -1;
        for (size_t i = 0; i < nph && i < 4096; i++) {
                GElf_Phdr ph;
                if (!gelf_getphdr(e->elf, (int)i, &ph))
                        continue;
                if (ph.p_type == PT_INTERP)
                        e->has_interp = true;
                if (ph.p_type == PT_LOAD && e->n_loads < MAX_LOADS)
                        e->loads[e->n_loads++] = ph;
        }

        size_t shstrndx;
        if (elf_getshdrstrndx(e->elf, &shstrndx) != 0)
                return 0; /* no section headers: program headers only */
        /* Two passes so that .dynsym wins over .symtab for the same name. */
        for (int pass = 0; pass < 2; pass++) {
                Elf_Scn *scn = NULL;
                size_t count = 0;
                while ((scn = elf_nextscn(e->elf, scn)) != NULL && count++ < 65536) {
                        GElf_Shdr sh;
                        if (!gelf_getshdr(scn, &sh))
                                continue;
                        if (pass == 0 && sh.sh_type == SHT_DYNSYM)
                                scan_symbols(e, scn, &sh, false);
                        if (pass == 1 && sh.sh_type == SHT_SYMTAB)
                                scan_symbols(e, scn, &sh, true);
                        if (pass != 0)
                                continue;
                        if (sh.sh_type == SHT_DYNAMIC)
                                scan_dynamic(e, scn, &sh);
                        const char *name = elf_strptr(e->elf, shstrndx, sh.sh_name);
                        if (!name)
                                continue;
                        if (strcmp(name, ".PyRuntime") == 0)
                                note_section(&e->pyruntime, &sh);
                        else if (strcmp(name, ".data") == 0)
                                note_section(&e->data, &sh);
                        else if (strcmp(name, ".bss") == 0)
                                note_section(&e->bss, &sh);
                        else if (strcmp(name, ".rodata") == 0)
                                note_section(&e->rodata, &sh);
                }
        }
        return 0;
}

static bool elf_has_interpreter(const struct elf_obj *e)
{
        return e->syms[SYM_RUNTIME].found || e->syms[SYM_PY_VERSION].found ||
               e->syms[SYM_CODE_TYPE].found || e->syms[SYM_TSTATE_CURRENT].found ||
               e->syms[SYM_INTERP_HEAD].found || e->pyruntime.found;
}

/* Read file bytes backing virtual address `vaddr` (unbiased). Returns 0 or -1. */
static int elf_read_vaddr(const struct elf_obj *e, uint64_t vaddr, void *buf, size_t len)
{
        for (size_t i = 0; i < e->n_loads; i++) {
                const GElf_Phdr *l = &e->loads[i];
                if (vaddr < l->p_vaddr || vaddr - l->p_vaddr > l->p_filesz ||
                    len > l->p_filesz - (vaddr - l->p_vaddr))
                        continue;
                off_t off = (off_t)(l->p_offset + (vaddr - l->p_vaddr));
                return pread(e->fd, buf, len, off) == (ssize_t)len ? 0 : -1;
        }
        return -1;
}

/*
 * Load bias of `o` as mapped, from pairs (mapping at file offset O, PT_LOAD
 * with page-aligned p_offset == O). When several candidates exist (segments
 * sharing a page), the one consistent with most mappings wins.
 */
static int compute_bias(const struct finder *f, const struct elf_obj *e, const struct object *o,
                        uint64_t *bias)
{
        const uint64_t mask = ~((uint64_t)f->page - 1);
        int best_score = 0;
        uint64_t best = 0;
        for (size_t i = 0; i < o->n_maps; i++) {
                for (size_t j = 0; j < e->n_loads; j++) {
                        const GElf_Phdr *l = &e->loads[j];
                        if ((l->p_offset & mask) != o->maps[i].offset)
                                continue;
                        uint64_t cand = o->maps[i].start - (l->p_vaddr & mask);
                        int score = 0;
                        for (size_t a = 0; a < o->n_maps; a++) {
                                for (size_t b = 0; b < e->n_loads; b++) {
                                        const GElf_Phdr *lb = &e->loads[b];
                                        uint64_t aoff = lb->p_offset & mask;
                                        uint64_t moff = o->maps[a].offset;
                                        if (moff < aoff || moff >= lb->p_offset + lb->p_filesz)
                                                continue;
                                        if (o->maps[a].start - cand ==
                                            (lb->p_vaddr & mask) + (moff - aoff)) {
                                                score++;
                                                break;
                                        }
                                }
                        }
                        if (score > best_score) {
                                best_score = score;
                                best = cand;
                        }
                }
        }
        if (best_score == 0)
                return -1;
        *bias = best;
        return 0;
}

/* --- Version ------------------------------------------------------------------------------ */

static struct era era_of(const struct elf_obj *e)
{
        struct era r = any_era;
        if (e->syms[SYM_STRING_TYPE].found)
                r.hi = 0x02ff;
        if (e->syms[SYM_INTERP_HEAD].found || e->syms[SYM_TSTATE_CURRENT].found)
                r.hi = r.hi < 0x0306 ? r.hi : 0x0306;
        if (e->syms[SYM_RUNTIME].found && r.lo < 0x0307)
                r.lo = 0x0307;
        if (e->pyruntime.found && r.lo < 0x030a)
                r.lo = 0x030a;
        if (e->syms[SYM_PY_VERSION].found && r.lo < 0x030b)
                r.lo = 0x030b;
        return r;
}

/* A PY_VERSION_HEX we could have been given: major 2 or 3, level alpha/beta/rc/final. */
static bool plausible_hex(uint32_t hex)
{
        unsigned major = hex >> 24, level = (hex >> 4) & 0xF;
        bool level_ok = level == 0xA || level == 0xB || level == 0xC || level == 0xF;
        return (major == 2 || major == 3) && level_ok;
}

/* Read from the target, remembering a permission failure for the caller. */
static int target_read(struct memsrc *m, int *perm_err, uint64_t addr, void *buf, size_t len)
{
        int rc = memsrc_read(m, addr, buf, len);
        if ((rc == -EPERM || rc == -ESRCH) && *perm_err == 0)
                *perm_err = rc;
        return rc;
}

/* Scan [addr, addr+size) of the target for Py_GetVersion()'s text, chunk by chunk. */
static int scan_target_version(struct memsrc *m, int *perm_err, uint64_t addr, uint64_t size,
                               struct era era, uint32_t *hex)
{
        if (size > MAX_SCAN_BYTES)
                size = MAX_SCAN_BYTES;
        char *buf = malloc(SCAN_CHUNK + VERSION_TEXT_MAX);
        if (!buf)
                return -ENOMEM;
        int rc = -ENOENT;
        for (uint64_t off = 0; off < size && rc == -ENOENT; off += SCAN_CHUNK) {
                uint64_t len = size - off;
                if (len > SCAN_CHUNK + VERSION_TEXT_MAX)
                        len = SCAN_CHUNK + VERSION_TEXT_MAX;
                if (target_read(m, perm_err, addr + off, buf, len) < 0) {
                        if (*perm_err)
                                break;
                        continue;
                }
                /* Chunks overlap by VERSION_TEXT_MAX, so no text is cut in two. */
                if (find_version_text(buf, len, era, hex) == 0)
                        rc = 0;
        }
        free(buf);
        return rc;
}

/*
 * Whether buf[i] begins a version inside a text string: not right after a
 * digit or dot, and everything back to the previous NUL printable (binary
 * tables in .rodata can hold "2.2.0\0" by chance; strings cannot).
 */
static bool starts_text_string(const char *buf, size_t i)
{
        if (i > 0 && (isdigit((unsigned char)buf[i - 1]) || buf[i - 1] == '.'))
                return false;
        size_t k = i;
        for (size_t steps = 0; k > 0 && steps < VERSION_TEXT_MAX; k--, steps++) {
                unsigned char c = (unsigned char)buf[k - 1];
                if (c == 0)
                        return true;
                if (c < 0x20 || c > 0x7e)
                        return false;
        }
        return k == 0; /* the start of the section, or a string too long to be ours */
}

/*
 * The PY_VERSION literal in .rodata: a NUL-terminated "X.Y.Z" not preceded by
 * a digit or dot (the linker may have merged it into the tail of a longer
 * string such as the install prefix). Accepts only a unique candidate that
 * the era and the file name (major.minor, when known) allow.
 */
static int rodata_version(const struct elf_obj *e, struct era era, int name_major, int name_minor,
                          uint32_t *hex)
{
        if (!e->rodata.found || e->rodata.nobits || e->rodata.size == 0)
                return -ENOENT;
        size_t size = e->rodata.size > MAX_RODATA_BYTES ? MAX_RODATA_BYTES : e->rodata.size;
        char *buf = malloc(size + 1);
        if (!buf)
                return -ENOMEM;
        if (pread(e->fd, buf, size, (off_t)e->rodata.offset) != (ssize_t)size) {
                free(buf);
                return -EIO;
        }
        buf[size] = 0;
        uint32_t found = 0;
        int n_distinct = 0;
        for (size_t i = 0; i + 5 < size && n_distinct < 2; i++) {
                if ((buf[i] != '2' && buf[i] != '3') || buf[i + 1] != '.')
                        continue;
                if (!starts_text_string(buf, i))
                        continue;
                uint32_t v;
                size_t n = pyfind_parse_version(buf + i, size - i, &v);
                if (n == 0 || buf[i + n] != 0 || !era_allows(era, v))
                        continue;
                if (name_major && (int)(v >> 24) != name_major)
                        continue;
                if (name_major && (int)((v >> 16) & 0xff) != name_minor)
                        continue;
                if (n_distinct == 0 || v != found) {
                        found = v;
                        n_distinct++;
                }
                i += n;
        }
        free(buf);
        if (n_distinct != 1)
                return -ENOENT;
        *hex = found;
        return 0;
}

struct version_result {
        uint32_t hex;
        bool exact;
        uint8_t source;
        bool free_threaded;
        bool have_ft;
};

static void determine_version(const struct object *o, const struct elf_obj *e, uint64_t bias,
                              uint64_t runtime_addr, struct memsrc *m, int *perm_err,
                              struct version_result *vr)
{
        struct era era = era_of(e);
        memset(vr, 0, sizeof(*vr));

        /* 1. Py_Version (3.11+), from memory or from the file. */
        if (e->syms[SYM_PY_VERSION].found) {
                uint64_t v = 0;
                uint64_t addr = e->syms[SYM_PY_VERSION].value;
                if (target_read(m, perm_err, addr + bias, &v, sizeof(v)) < 0 &&
                    elf_read_vaddr(e, addr, &v, sizeof(v)) < 0)
                        v = 0;
                if (v <= UINT32_MAX && plausible_hex((uint32_t)v) && era_allows(era, (uint32_t)v)) {
                        vr->hex = (uint32_t)v;
                        vr->exact = true;
                        vr->source = PYFIND_VSRC_PY_VERSION;
                }
        }

        /* 2. _Py_DebugOffsets (3.13+): also tells free-threading. */
        if (runtime_addr) {
                struct {
                        char cookie[8];
                        uint64_t version;
                        uint64_t free_threaded;
                } dbg;
                if (target_read(m, perm_err, runtime_addr, &dbg, sizeof(dbg)) == 0 &&
                    memcmp(dbg.cookie, "xdebugpy", 8) == 0 && dbg.version <= UINT32_MAX &&
                    plausible_hex((uint32_t)dbg.version) && (dbg.version >> 16) >= 0x030d) {
                        vr->have_ft = true;
                        vr->free_threaded = dbg.free_threaded != 0;
                        if (!vr->exact) {
                                vr->hex = (uint32_t)dbg.version;
                                vr->exact = true;
                                vr->source = PYFIND_VSRC_DEBUG_OFFSETS;
                        }
                }
        }
        if (vr->exact)
                return;

        /* 3. Py_GetVersion()'s text in the target: its static buffer if named, else a scan. */
        uint32_t v;
        if (e->version_buf.found) {
                char buf[1025];
                size_t len = e->version_buf.size;
                if (target_read(m, perm_err, e->version_buf.value + bias, buf, len) == 0) {
                        buf[len] = 0;
                        if (is_version_text(buf, len + 1, &v) && era_allows(era, v)) {
                                vr->hex = v;
                                vr->exact = true;
                                vr->source = PYFIND_VSRC_VERSION_STRING;
                                return;
                        }
                }
        }
        const struct section *secs[2] = {&e->bss, &e->data};
        for (int i = 0; i < 2 && !*perm_err; i++) {
                if (!secs[i]->found || secs[i]->addr == 0)
                        continue;
                if (scan_target_version(m, perm_err, secs[i]->addr + bias, secs[i]->size, era,
                                        &v) == 0) {
                        vr->hex = v;
                        vr->exact = true;
                        vr->source = PYFIND_VSRC_VERSION_STRING;
                        return;
                }
        }

        /* 4. The PY_VERSION literal in the file; 5. the file name. */
        int ma = 0, mi = 0;
        char fl[8];
        bool lib;
        bool named = pyfind_parse_python_name(base_name(o->path), &ma, &mi, fl, sizeof(fl), &lib);
        if (rodata_version(e, era, named ? ma : 0, mi, &v) == 0) {
                vr->hex = v;
                vr->exact = true;
                vr->source = PYFIND_VSRC_RODATA;
                return;
        }
        if (named) {
                uint32_t hex = (uint32_t)ma << 24 | (uint32_t)mi << 16 | 0xF0;
                if (era_allows(era, hex)) {
                        vr->hex = hex;
                        vr->exact = false;
                        vr->source = PYFIND_VSRC_FILE_NAME;
                }
        }
}

static bool version_supported(uint32_t hex)
{
        return pylayout_supported((int)(hex >> 24), (int)(hex >> 16 & 0xff));
}

void pyfind_version_str(const struct pyfind_target *t, char *buf, size_t len)
{
        if (!len)
                return;
        unsigned major = t->version_hex >> 24, minor = (t->version_hex >> 16) & 0xff;
        unsigned micro = (t->version_hex >> 8) & 0xff, level = (t->version_hex >> 4) & 0xf;
        unsigned serial = t->version_hex & 0xf;
        const char *flags =
            t->free_threaded ? (t->debug_build ? "td" : "t") : (t->debug_build ? "d" : "");
        if (!t->version_exact) {
                snprintf(buf, len, "%u.%u%s", major, minor, flags);
                return;
        }
        const char *lv = level == 0xA ? "a" : level == 0xB ? "b" : level == 0xC ? "rc" : "";
        if (*lv)
                snprintf(buf, len, "%u.%u.%u%s%u%s", major, minor, micro, lv, serial, flags);
        else
                snprintf(buf, len, "%u.%u.%u%s", major, minor, micro, flags);
}

/* --- interp_head of stripped 2.7 / 3.6 builds ---------------------------------------------- */

#define MAX_HEAD_CANDIDATES 65536 /* non-zero words of .bss/.data followed, two reads each */

/*
 * interp_head is LOCAL, so `strip` loses it. Find it the way py-spy and Austin
 * do: a word p in .bss or .data with p->tstate_head->interp == p. (pystate.c's
 * autoInterpreterState also points at the main interpreter and may be found
 * instead; the two differ only once subinterpreters exist.) Both structs
 * are heap-allocated, which rules out static objects that point at
 * themselves (a type object's ob_type is &PyType_Type, whose own ob_type is
 * itself: that passes the round trip). Returns the word's address, or 0 (not
 * initialised yet, or no such word).
 */
static uint64_t scan_interp_head(struct memsrc *m, const struct elf_obj *e, uint64_t bias,
                                 unsigned tstate_interp_off)
{
        const uint64_t interp_tstate_head_off = 8; /* 2.7 and 3.6: {next, tstate_head} */
        const struct section *secs[2] = {&e->bss, &e->data};
        uint64_t *buf = malloc(SCAN_CHUNK);
        if (!buf)
                return 0;
        /* The image's own extent, from the program headers. */
        uint64_t img_lo = UINT64_MAX, img_hi = 0;
        for (size_t i = 0; i < e->n_loads; i++) {
                if (e->loads[i].p_vaddr < img_lo)
                        img_lo = e->loads[i].p_vaddr;
                if (e->loads[i].p_vaddr + e->loads[i].p_memsz > img_hi)
                        img_hi = e->loads[i].p_vaddr + e->loads[i].p_memsz;
        }
        img_lo += bias;
        img_hi += bias;
        uint64_t found = 0;
        unsigned followed = 0;
        for (int s = 0; s < 2 && !found; s++) {
                if (!secs[s]->found || secs[s]->addr == 0)
                        continue;
                uint64_t start = (secs[s]->addr + bias + 7) & ~(uint64_t)7;
                uint64_t size = secs[s]->size > MAX_SCAN_BYTES ? MAX_SCAN_BYTES : secs[s]->size;
                uint64_t end = secs[s]->addr + bias + size;
                for (uint64_t at = start; at + 8 <= end && !found; at += SCAN_CHUNK) {
                        uint64_t len =
                            end - at < SCAN_CHUNK ? (end - at) & ~(uint64_t)7 : SCAN_CHUNK;
                        if (memsrc_read(m, at, buf, len) < 0)
                                continue;
                        for (uint64_t i = 0; i < len / 8 && followed < MAX_HEAD_CANDIDATES; i++) {
                                uint64_t p = buf[i], ts = 0, back = 0;
                                if (p == 0 || (p & 7) || p >= (1ull << 56) ||
                                    (p >= img_lo && p < img_hi))
                                        continue;
                                followed++;
                                if (memsrc_read(m, p + interp_tstate_head_off, &ts, 8) < 0 ||
                                    ts == 0 || (ts & 7) || ts == p || (ts >= img_lo && ts < img_hi))
                                        continue;
                                if (memsrc_read(m, ts + tstate_interp_off, &back, 8) == 0 &&
                                    back == p) {
                                        found = at + 8 * i;
                                        break;
                                }
                        }
                }
        }
        free(buf);
        return found;
}

/* --- Putting it together ------------------------------------------------------------------ */

static int read_exe_link(struct finder *f)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/exe", (int)f->pid);
        ssize_t n = readlink(path, f->exe, sizeof(f->exe) - 1);
        if (n < 0) {
                f->exe[0] = 0;
                return -errno;
        }
        f->exe[n] = 0;
        static const char deleted[] = " (deleted)";
        size_t dl = sizeof(deleted) - 1;
        if ((size_t)n > dl && strcmp(f->exe + n - dl, deleted) == 0)
                f->exe[n - dl] = 0; /* as in maps, where the suffix is stripped too */
        return 0;
}

/* Candidate order: libpython*.so* first, then the executable, then the rest in map order. */
static int candidate_rank(const struct finder *f, const struct object *o)
{
        if (is_libpython_name(o->path))
                return 0;
        return is_exe(f, o) ? 1 : 2;
}

/*
 * Why no interpreter was found: the dynamic loader may not have mapped
 * libpython yet. Returns PYFIND_NOT_READY or PYFIND_NOT_PYTHON with a message.
 */
static int explain_not_found(struct finder *f)
{
        for (size_t i = 0; i < f->n_objs; i++) {
                struct object *o = &f->objs[i];
                if (!is_exe(f, o))
                        continue;
                struct elf_obj e = {.fd = open_object(f, o)};
                if (e.fd < 0 || elf_load(&e) < 0) {
                        elf_close(&e);
                        break;
                }
                int rc = 0;
                if (e.has_interp && e.needs_libpython)
                        rc = fail(f, PYFIND_NOT_READY,
                                  "process %d (%s) is starting: %s is not loaded yet; retry in a "
                                  "moment",
                                  (int)f->pid, f->comm, e.needed_libpython);
                else if (e.has_interp && !f->libc_mapped &&
                         strncmp(base_name(o->path), "python", 6) == 0)
                        rc = fail(f, PYFIND_NOT_READY,
                                  "process %d (%s) is starting: the dynamic loader has not "
                                  "finished; retry in a moment",
                                  (int)f->pid, f->comm);
                elf_close(&e);
                if (rc)
                        return rc;
                break;
        }
        return fail(f, PYFIND_NOT_PYTHON,
                    "process %d (%s) does not look like CPython: no libpython or _PyRuntime found",
                    (int)f->pid, f->comm);
}

static uint64_t sym_addr(const struct elf_obj *e, enum sym_id id, uint64_t bias)
{
        return e->syms[id].found ? e->syms[id].value + bias : 0;
}

static int finish(struct finder *f, struct object *o, struct elf_obj *e, struct pyfind_target *out)
{
        struct pyfind_target t;
        memset(&t, 0, sizeof(t));
        t.pid = f->pid;

        if (e->elf_class != ELFCLASS64)
                return fail(f, PYFIND_UNSUPPORTED,
                            "process %d (%s) runs a 32-bit Python (%s); only 64-bit targets are "
                            "supported",
                            (int)f->pid, f->comm, o->path);

        uint64_t bias;
        if (compute_bias(f, e, o, &bias) < 0)
                return fail(f, PYFIND_NOT_READY,
                            "process %d (%s): %s is not fully mapped yet (no mapping matches "
                            "its program headers); retry in a moment",
                            (int)f->pid, f->comm, o->path);

        t.load_bias = bias;
        t.shared = !is_exe(f, o);
        snprintf(t.elf_path, sizeof(t.elf_path), "%s", o->path);
        if (e->syms[SYM_RUNTIME].found) {
                t.runtime_addr = e->syms[SYM_RUNTIME].value + bias;
                t.runtime_size = e->syms[SYM_RUNTIME].size;
        } else if (e->pyruntime.found && e->pyruntime.addr) {
                t.runtime_addr = e->pyruntime.addr + bias;
                t.runtime_size = e->pyruntime.size;
                t.runtime_from_section = true;
        }
        t.code_type_addr = sym_addr(e, SYM_CODE_TYPE, bias);

        struct memsrc m;
        memsrc_init_process(&m, f->pid);
        int perm_err = 0;

        /* Probe that we may read the target at all, before trusting any other failure. */
        uint64_t probe_addr = t.runtime_addr     ? t.runtime_addr
                              : t.code_type_addr ? t.code_type_addr
                                                 : sym_addr(e, SYM_TSTATE_CURRENT, bias);
        if (probe_addr) {
                uint64_t word;
                int rc = memsrc_read(&m, probe_addr, &word, sizeof(word));
                if (rc == -EPERM)
                        return fail_permission(f, "the memory");
                if (rc == -ESRCH)
                        return fail(f, PYFIND_NO_PROCESS, "process %d exited", (int)f->pid);
                if (rc < 0)
                        return fail(f, PYFIND_NOT_READY,
                                    "process %d (%s): %s is mapped but its data at %#llx cannot "
                                    "be read yet (%s); retry in a moment",
                                    (int)f->pid, f->comm, o->path, (unsigned long long)probe_addr,
                                    strerror(-rc));
        }

        struct version_result vr;
        determine_version(o, e, bias, t.runtime_addr, &m, &perm_err, &vr);
        if (perm_err == -EPERM)
                return fail_permission(f, "the memory");
        if (perm_err == -ESRCH)
                return fail(f, PYFIND_NO_PROCESS, "process %d exited", (int)f->pid);
        if (vr.source == PYFIND_VSRC_NONE)
                return fail(f, PYFIND_UNSUPPORTED,
                            "process %d (%s): found the interpreter in %s but could not tell its "
                            "Python version (no Py_Version, version string or versioned file "
                            "name)",
                            (int)f->pid, f->comm, o->path);
        t.version_hex = vr.hex;
        t.version_exact = vr.exact;
        t.version_source = vr.source;

        /* ABI flags from the name ("libpython3.13t.so", "python3.12d") when it has them. */
        int ma, mi;
        char flags[8] = "";
        bool lib;
        if (!pyfind_parse_python_name(base_name(o->path), &ma, &mi, flags, sizeof(flags), &lib))
                flags[0] = 0;
        t.free_threaded = vr.have_ft ? vr.free_threaded : strchr(flags, 't') != NULL;
        t.debug_build = strchr(flags, 'd') != NULL || e->syms[SYM_REF_TOTAL].found ||
                        e->syms[SYM_NEGATIVE_REFCOUNT].found;

        if (!version_supported(t.version_hex)) {
                char vs[32], list[128];
                pyfind_version_str(&t, vs, sizeof(vs));
                pylayout_supported_list(list, sizeof(list));
                return fail(f, PYFIND_UNSUPPORTED,
                            "process %d (%s) runs Python %s (%s), which pyflame cannot read; "
                            "supported versions: %s",
                            (int)f->pid, f->comm, vs, o->path, list);
        }

        unsigned mm = t.version_hex >> 16;
        if (mm <= 0x0306) {
                t.runtime_addr = 0;
                t.runtime_size = 0;
                t.runtime_from_section = false;
                t.interp_head_addr = sym_addr(e, SYM_INTERP_HEAD, bias);
                t.tstate_current_addr = sym_addr(e, SYM_TSTATE_CURRENT, bias);
        }
        if (mm == 0x0306) {
                t.gil_locked_addr = sym_addr(e, SYM_GIL_LOCKED, bias);
                t.gil_last_holder_addr = sym_addr(e, SYM_GIL_LAST_HOLDER, bias);
        }
        t.str_type_addr = sym_addr(e, mm < 0x0300 ? SYM_STRING_TYPE : SYM_UNICODE_TYPE, bias);
        if (mm >= 0x0307 && !t.runtime_addr)
                return fail(f, PYFIND_UNSUPPORTED,
                            "process %d (%s): %s has neither a _PyRuntime symbol nor a "
                            ".PyRuntime section (a stripped build before 3.10?); scanning for the "
                            "runtime is not supported yet",
                            (int)f->pid, f->comm, o->path);
        if (mm <= 0x0306 && !t.interp_head_addr) {
                t.interp_head_addr = scan_interp_head(&m, e, bias, mm < 0x0300 ? 8 : 16);
                if (!t.interp_head_addr)
                        return fail(f, PYFIND_NOT_READY,
                                    "process %d (%s): %s is stripped (no interp_head symbol) and "
                                    "no interpreter was found in its data: not initialised yet? "
                                    "retry in a moment",
                                    (int)f->pid, f->comm, o->path);
        }
        *out = t;
        return PYFIND_OK;
}

int pyfind_target(pid_t pid, struct pyfind_target *out, char *err, size_t errlen)
{
        struct finder *f = finder_new(pid);
        if (!f) {
                if (err && errlen)
                        snprintf(err, errlen, "out of memory");
                return PYFIND_NOT_PYTHON;
        }
        f->err = err;
        f->errlen = errlen;
        if (err && errlen)
                err[0] = 0;
        int rc;

        if (pid <= 0) {
                rc = fail(f, PYFIND_NO_PROCESS, "invalid pid %d", (int)pid);
                goto out;
        }
        if (procfs_comm(pid, f->comm, sizeof(f->comm)) < 0)
                snprintf(f->comm, sizeof(f->comm), "?");
        rc = procfs_maps_foreach(pid, collect_mapping, f);
        if (rc == -ESRCH) {
                rc = fail(f, PYFIND_NO_PROCESS, "no process with pid %d", (int)pid);
                goto out;
        }
        if (rc == -EACCES || rc == -EPERM) {
                rc = fail_permission(f, "the memory map");
                goto out;
        }
        if (rc < 0) {
                rc = fail(f, PYFIND_NOT_PYTHON, "cannot read /proc/%d/maps: %s", (int)pid,
                          strerror(-rc));
                goto out;
        }
        if (f->n_objs == 0) {
                rc = fail(f, PYFIND_NOT_PYTHON,
                          "process %d (%s) does not look like CPython: it maps no files (a "
                          "kernel thread or a zombie?)",
                          (int)pid, f->comm);
                goto out;
        }
        read_exe_link(f);
        elf_version(EV_CURRENT);

        rc = 1;
        for (int rank = 0; rank < 3 && rc == 1; rank++) {
                for (size_t i = 0; i < f->n_objs && rc == 1; i++) {
                        struct object *o = &f->objs[i];
                        if (candidate_rank(f, o) != rank)
                                continue;
                        struct elf_obj e = {.fd = open_object(f, o)};
                        if (e.fd >= 0 && elf_load(&e) == 0 && elf_has_interpreter(&e))
                                rc = finish(f, o, &e, out);
                        elf_close(&e);
                }
        }
        if (rc == 1)
                rc = explain_not_found(f);
out:
        free_objects(f);
        free(f);
        return rc;
}

/*
 * The value of symbol `sym` (.dynsym or .symtab, a local one too) in the ELF
 * file open in e: 1, or 0 when it is not there.
 */
static int elf_find_symbol(struct elf_obj *e, const char *sym, uint64_t *value)
{
        Elf_Scn *scn = NULL;
        size_t count = 0;
        while ((scn = elf_nextscn(e->elf, scn)) != NULL && count++ < 65536) {
                GElf_Shdr sh;
                if (!gelf_getshdr(scn, &sh) ||
                    (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM))
                        continue;
                Elf_Data *d = elf_getdata(scn, NULL);
                if (!d || sh.sh_entsize == 0)
                        continue;
                size_t n = d->d_size / sh.sh_entsize;
                for (size_t i = 1; i < n && i < MAX_SYMBOLS; i++) {
                        GElf_Sym s;
                        if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF || !s.st_name)
                                continue;
                        const char *name = elf_strptr(e->elf, sh.sh_link, s.st_name);
                        if (name && strcmp(name, sym) == 0) {
                                *value = s.st_value;
                                return 1;
                        }
                }
        }
        return 0;
}

/* The address and size of section `name` of the ELF file open in e (unbiased): 1, or 0. */
static int elf_find_section(struct elf_obj *e, const char *name, uint64_t *addr, uint64_t *size)
{
        size_t shstrndx;
        if (elf_getshdrstrndx(e->elf, &shstrndx) != 0)
                return 0;
        Elf_Scn *scn = NULL;
        size_t count = 0;
        while ((scn = elf_nextscn(e->elf, scn)) != NULL && count++ < 65536) {
                GElf_Shdr sh;
                const char *n;
                if (gelf_getshdr(scn, &sh) && (n = elf_strptr(e->elf, shstrndx, sh.sh_name)) &&
                    strcmp(n, name) == 0 && sh.sh_addr) {
                        *addr = sh.sh_addr;
                        *size = sh.sh_size;
                        return 1;
                }
        }
        return 0;
}

/*
 * Section `section`, or else symbol `sym`, of the file process pid maps
 * whose name begins with `prefix`; with `own_file`, then of the
 * interpreter's own file. Its address (and a section's size) as mapped: 0,
 * 1 when no such file has it, or a negative errno.
 */
static int object_lookup(pid_t pid, const char *prefix, bool own_file, const char *section,
                         const char *sym, uint64_t *addr, uint64_t *size)
{
        struct finder *f = finder_new(pid);
        if (!f)
                return -ENOMEM;
        int rc = pid > 0 ? procfs_maps_foreach(pid, collect_mapping, f) : -ESRCH;
        rc = rc < 0 ? rc : 1;
        elf_version(EV_CURRENT);
        /* The module's own file first; then the interpreter's, where it may be built in. */
        for (int pass = 0; pass < (own_file ? 2 : 1); pass++) {
                for (size_t i = 0; rc == 1 && i < f->n_objs; i++) {
                        struct object *o = &f->objs[i];
                        const char *b = base_name(o->path);
                        bool want = pass == 0 ? strncmp(b, prefix, strlen(prefix)) == 0
                                              : strncmp(b, "python", 6) == 0 ||
                                                    strncmp(b, "libpython", 9) == 0;
                        if (!want)
                                continue;
                        struct elf_obj e = {.fd = open_object(f, o)};
                        uint64_t at, len = 0, bias;
                        bool found = e.fd >= 0 && elf_load(&e) == 0 &&
                                     (section ? elf_find_section(&e, section, &at, &len)
                                              : elf_find_symbol(&e, sym, &at));
                        if (found && compute_bias(f, &e, o, &bias) == 0) {
                                *addr = bias + at;
                                if (size)
                                        *size = len;
                                rc = 0;
                        }
                        elf_close(&e);
                }
        }
        free_objects(f);
        free(f);
        return rc;
}

int pyfind_object_section(pid_t pid, const char *prefix, const char *section, bool own_file,
                          uint64_t *addr, uint64_t *size)
{
        return object_lookup(pid, prefix, own_file, section, NULL, addr, size);
}

int pyfind_object_symbol(pid_t pid, const char *prefix, const char *sym, uint64_t *addr)
{
        return object_lookup(pid, prefix, false, NULL, sym, addr, NULL);
}
