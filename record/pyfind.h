/*
 * pyfind.h - find the CPython interpreter inside a running process.
 *
 * From /proc/PID/maps, pick the ELF object that holds the interpreter (the
 * executable for static builds, libpython for --enable-shared, whatever the
 * executable is called), open it through /proc/PID/root (so targets in other
 * mount namespaces work), compute its load bias, and locate the symbols a
 * sampler needs, from .dynsym, .symtab or the .PyRuntime section, so stripped
 * binaries work too. The exact Python version is read from the binary or the
 * target's memory (Py_Version, _Py_DebugOffsets, the version string), never
 * from file names alone.
 */
#ifndef PYFLAME_PYFIND_H
#define PYFLAME_PYFIND_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "memsrc.h"

/*
 * Distinct failures of pyfind_target(), each a separate exit status for the
 * tool. They are negative errno values, the one error convention of record/:
 * a status from here and one from a read or a system call never mean two
 * different things.
 */
enum pyfind_status {
        PYFIND_OK = 0,
        PYFIND_NO_PROCESS = -ESRCH,    /* no such process */
        PYFIND_PERMISSION = -EPERM,    /* cannot read its maps or memory */
        PYFIND_NOT_PYTHON = -ENOEXEC,  /* no interpreter found in the process */
        PYFIND_UNSUPPORTED = -ENOTSUP, /* a Python we cannot read (version named in the message) */
        PYFIND_NOT_READY = -EAGAIN,    /* Python found but not initialised yet: retry later */
};

/* Where version_hex came from, best first (for messages and tests). */
enum pyfind_version_source {
        PYFIND_VSRC_NONE = 0,
        PYFIND_VSRC_PY_VERSION,     /* the Py_Version constant (3.11+) */
        PYFIND_VSRC_DEBUG_OFFSETS,  /* _Py_DebugOffsets.version at _PyRuntime (3.13+) */
        PYFIND_VSRC_VERSION_STRING, /* Py_GetVersion()'s buffer in the target's memory */
        PYFIND_VSRC_RODATA,         /* the PY_VERSION literal in the ELF's read-only data */
        PYFIND_VSRC_FILE_NAME,      /* libpythonX.Y / pythonX.Y: major.minor only */
};

struct pyfind_target {
        pid_t pid;
        /* PY_VERSION_HEX: major<<24 | minor<<16 | micro<<8 | level<<4 | serial. */
        uint32_t version_hex;
        bool version_exact;      /* false when only major.minor is known */
        bool free_threaded;      /* a 't' build (Py_GIL_DISABLED) */
        bool debug_build;        /* a 'd' build (Py_DEBUG) */
        bool shared;             /* interpreter lives in libpython*.so */
        char elf_path[PATH_MAX]; /* path of that ELF as the target maps it */
        uint64_t load_bias;      /* runtime address = symbol value + load_bias */

        /* Addresses in the target; 0 when the version has no such thing. */
        uint64_t runtime_addr;         /* _PyRuntime (3.7+) */
        uint64_t interp_head_addr;     /* &interp_head (2.7, 3.6) */
        uint64_t tstate_current_addr;  /* &_PyThreadState_Current (2.7, 3.6) */
        uint64_t gil_locked_addr;      /* &gil_locked (3.6, static) */
        uint64_t gil_last_holder_addr; /* &gil_last_holder (3.6, static) */
        uint64_t code_type_addr;       /* &PyCode_Type */
        uint64_t str_type_addr;        /* &PyUnicode_Type (3.x) or &PyString_Type (2.7) */
        /*
         * _asyncio's .AsyncioDebug (3.14+): 0 here; the task walk finds it
         * once the module is loaded (a synthetic image sets it).
         */
        uint64_t asyncio_debug_addr;

        /* Added by pyfind: how the above were found. */
        uint64_t runtime_size;     /* sizeof _PyRuntime from its symbol or section, 0 if unknown */
        bool runtime_from_section; /* runtime_addr came from the .PyRuntime section */
        uint8_t version_source;    /* enum pyfind_version_source */
};

/*
 * Find the interpreter of process `pid`. On success fills *out and returns
 * PYFIND_OK. On failure returns a negative enum pyfind_status, leaves *out
 * untouched and writes a one-line message (that says the fix where there is
 * one) into err[errlen].
 */
int pyfind_target(pid_t pid, struct pyfind_target *out, char *err, size_t errlen);

/* "3.12.1", "3.13.0t", "2.7" ... into buf. */
void pyfind_version_str(const struct pyfind_target *t, char *buf, size_t len);

/*
 * The address in process pid of symbol `sym` (a local one too) of the file
 * it maps whose name begins with `prefix` ("_asyncio."): 0 with *addr, 1
 * when no such file is mapped or it has no such symbol (stripped), or a
 * negative errno.
 */
int pyfind_object_symbol(pid_t pid, const char *prefix, const char *sym, uint64_t *addr);

/*
 * The address and size in process pid of ELF section `section`
 * (".AsyncioDebug") of the file it maps whose name begins with `prefix`,
 * else, with `own_file`, of its interpreter's own file (python*, libpython*:
 * a module built in): 0, 1 when none has it, or a negative errno.
 */
int pyfind_object_section(pid_t pid, const char *prefix, const char *section, bool own_file,
                          uint64_t *addr, uint64_t *size);

/*
 * The parsers under the finder, on their own (the unit tests drive them):
 * - pyfind_parse_version: a version "X.Y.Z[{a,b,c,rc}N][+local]" at the
 *   start of s (majors 2 and 3) into *hex (PY_VERSION_HEX); returns the
 *   bytes used, 0 when s does not start with one.
 * - pyfind_scan_version_string: Py_GetVersion()'s text, of any version, in
 *   a block of a target's data; 0 and *hex, or -ENOENT.
 * - pyfind_parse_python_name: "libpython3.13t.so.1.0", "python3.11",
 *   "libpython3.6m.so" into major, minor and ABI flags, and whether it is
 *   the library; false when the name is not of that shape.
 */
size_t pyfind_parse_version(const char *s, size_t len, uint32_t *hex);
int pyfind_scan_version_string(const char *buf, size_t len, uint32_t *hex);
bool pyfind_parse_python_name(const char *base, int *major, int *minor, char *flags,
                              size_t flagslen, bool *is_lib);

#endif
