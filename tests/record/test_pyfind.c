/*
 * test_pyfind.c - unit tests of pyfind (finding the interpreter in a live
 * process) and of the procfs helpers it shares with the sampler.
 *
 * The pyfind tests start every installed interpreter (pyenv 2.7 and 3.6+,
 * Debian's static /usr/bin/python3.11; absent ones are skipped) on a script
 * that prints, from inside, the truth: sys.hexversion, and the addresses of
 * _PyRuntime, _PyThreadState_Current, PyCode_Type and str (via ctypes and
 * id()). pyfind_target() on that pid must agree. Further cases: libpython
 * embedded under another name (and deleted after loading), a fake stripped
 * interpreter that only has a .PyRuntime section with _Py_DebugOffsets (this
 * same file built with -DFAKE_PYRUNTIME_MODULE as a shared module), a
 * process stopped before the dynamic loader ran, a non-Python process, a
 * dead pid, and an unprivileged caller.
 *
 * The parsers are tested through what pyfind.h exposes.
 */
#if defined(FAKE_ASYNCIO_MODULE)

/*
 * A stand-in for _asyncio's shared object: its debug section (3.14+) and
 * 3.6's static registry of tasks, a local symbol.
 */
#include <stdint.h>

static uint64_t fake_debug[8] __attribute__((section(".AsyncioDebug"), used)) = {144, 40, 96};
static void *all_tasks __attribute__((used)) = &fake_debug;

__attribute__((visibility("default"))) void *fake_debug_address(void);
__attribute__((visibility("default"))) void *fake_debug_address(void)
{
        return &fake_debug;
}

__attribute__((visibility("default"))) void *fake_all_tasks_address(void);
__attribute__((visibility("default"))) void *fake_all_tasks_address(void)
{
        return &all_tasks;
}

#elif defined(FAKE_PYRUNTIME_MODULE)

/*
 * A stand-in for a stripped interpreter: no Python symbols at all, only the
 * .PyRuntime section holding the start of _Py_DebugOffsets, like 3.13+.
 */
#include <stdint.h>

static struct {
        char cookie[8];
        uint64_t version;
        uint64_t free_threaded;
        uint64_t rest[16];
} fake_runtime __attribute__((section(".PyRuntime"), used)) = {
    {'x', 'd', 'e', 'b', 'u', 'g', 'p', 'y'}, FAKE_VERSION, FAKE_FREE_THREADED, {0}};

/* Where the fake runtime is, so the test can compare. */
__attribute__((visibility("default"))) void *fake_runtime_address(void);
__attribute__((visibility("default"))) void *fake_runtime_address(void)
{
        return &fake_runtime;
}

#else

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memsrc.h"
#include "procfs.h"
#include "pyfind.h"

/*
 * Runs inside the target (2.7 and 3.x): prints the truth on one line, then
 * sleeps until killed. Addresses through ctypes (pythonapi sees libpython or
 * the static executable alike) and id().
 */
static const char truth_script[] =
    "import sys, ctypes, sysconfig, time\n"
    "api = ctypes.pythonapi\n"
    "def addr(name):\n"
    "    try:\n"
    "        return ctypes.addressof(ctypes.c_char.in_dll(api, name))\n"
    "    except ValueError:\n"
    "        return 0\n"
    "api.PyInterpreterState_Head.restype = ctypes.c_void_p\n"
    "api.PyThreadState_Get.restype = ctypes.c_void_p\n"
    "shared = int('libpython' in open('/proc/self/maps').read())\n"
    "out = [('hex', sys.hexversion), ('runtime', addr('_PyRuntime')),\n"
    "       ('tstate_current', addr('_PyThreadState_Current')),\n"
    "       ('py_version', addr('Py_Version')),\n"
    "       ('code_type', id(type((lambda: 0).__code__))), ('str_type', id(str)),\n"
    "       ('interp', api.PyInterpreterState_Head() or 0),\n"
    "       ('tstate', api.PyThreadState_Get() or 0),\n"
    "       ('debug', int(hasattr(sys, 'gettotalrefcount'))),\n"
    "       ('ft', int(bool(sysconfig.get_config_var('Py_GIL_DISABLED')))),\n"
    "       ('shared', shared)]\n"
    "sys.stdout.write(' '.join('%s=%d' % kv for kv in out) + '\\n')\n"
    "sys.stdout.flush()\n"
    "time.sleep(600)\n";

struct truth {
        unsigned long long hex, runtime, tstate_current, py_version, code_type, str_type, interp,
            tstate, debug, ft, shared;
};

struct child {
        pid_t pid;
        int out_fd;
};

static void child_kill(struct child *c)
{
        if (c->pid > 0) {
                kill(c->pid, SIGKILL);
                waitpid(c->pid, NULL, 0);
        }
        if (c->out_fd >= 0)
                close(c->out_fd);
        c->pid = -1;
        c->out_fd = -1;
}

/* Fork; in the child, send stdout to a pipe and run fn(arg). */
static int child_start(struct child *c, void (*fn)(const void *arg), const void *arg)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* Never outlive the test binary, whatever happens to it. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(p[1], 1);
                fn(arg);
                _exit(127);
        }
        close(p[1]);
        c->pid = pid;
        c->out_fd = p[0];
        return 0;
}

/* The child of the running test, killed by the teardown even when an assertion failed. */
static struct child g_child = {-1, -1};
static char g_tmpdir[64], g_tmpfile[PATH_MAX];

static int teardown_child(void **state)
{
        child_kill(&g_child);
        if (g_tmpfile[0])
                unlink(g_tmpfile);
        if (g_tmpdir[0])
                rmdir(g_tmpdir);
        g_tmpfile[0] = g_tmpdir[0] = 0;
        return 0;
}

static void exec_python(const void *arg)
{
        const char *py = arg;
        execl(py, py, "-c", truth_script, (char *)NULL);
}

/* Read the truth line (bounded, with the child's death as EOF). */
static int read_truth(struct child *c, struct truth *t)
{
        char line[2048];
        size_t n = 0;
        while (n + 1 < sizeof(line)) {
                ssize_t r = read(c->out_fd, line + n, sizeof(line) - 1 - n);
                if (r <= 0)
                        break;
                n += (size_t)r;
                if (memchr(line, '\n', n))
                        break;
        }
        line[n] = 0;
        memset(t, 0, sizeof(*t));
        struct {
                const char *key;
                unsigned long long *v;
        } keys[] = {{"hex", &t->hex},
                    {"runtime", &t->runtime},
                    {"tstate_current", &t->tstate_current},
                    {"py_version", &t->py_version},
                    {"code_type", &t->code_type},
                    {"str_type", &t->str_type},
                    {"interp", &t->interp},
                    {"tstate", &t->tstate},
                    {"debug", &t->debug},
                    {"ft", &t->ft},
                    {"shared", &t->shared}};
        int found = 0;
        for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n")) {
                char *eq = strchr(tok, '=');
                if (!eq)
                        continue;
                *eq = 0;
                for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                        if (strcmp(tok, keys[i].key) == 0) {
                                *keys[i].v = strtoull(eq + 1, NULL, 10);
                                found++;
                        }
                }
        }
        return found == (int)(sizeof(keys) / sizeof(keys[0])) ? 0 : -1;
}

static uint64_t read_word(pid_t pid, uint64_t addr)
{
        struct memsrc m;
        memsrc_init_process(&m, pid);
        uint64_t v = 0;
        assert_int_equal(memsrc_read(&m, addr, &v, sizeof(v)), 0);
        return v;
}

/* Compare pyfind's answer with the truth the interpreter printed. */
static void check_target(pid_t pid, const struct truth *tr, const struct pyfind_target *t,
                         bool stripped)
{
        char vs[32];
        pyfind_version_str(t, vs, sizeof(vs));
        print_message("    %s: %s version %s (source %d) runtime %#llx%s bias %#llx\n", t->elf_path,
                      t->shared ? "shared" : "static", vs, t->version_source,
                      (unsigned long long)t->runtime_addr,
                      t->runtime_from_section ? " (section)" : "",
                      (unsigned long long)t->load_bias);
        assert_int_equal(t->pid, pid);
        assert_true(t->version_exact);
        assert_int_equal(t->version_hex, tr->hex);
        assert_int_equal(t->shared, tr->shared != 0);
        assert_int_equal(t->free_threaded, tr->ft != 0);
        assert_int_equal(t->debug_build, tr->debug != 0);
        assert_int_equal(t->code_type_addr, tr->code_type);
        assert_int_equal(t->str_type_addr, tr->str_type);
        unsigned mm = (unsigned)(tr->hex >> 16);
        if (mm >= 0x030b)
                assert_int_equal(t->version_source, PYFIND_VSRC_PY_VERSION);
        if (mm >= 0x0307) {
                assert_int_equal(t->runtime_addr, tr->runtime);
                assert_true(t->runtime_size > 0);
                assert_int_equal(t->interp_head_addr, 0);
                assert_int_equal(t->tstate_current_addr, 0);
                return;
        }
        /* 2.7 and 3.6: interp_head is LOCAL, so check it by reading through it. */
        assert_int_equal(t->runtime_addr, 0);
        assert_int_equal(t->tstate_current_addr, tr->tstate_current);
        assert_true(t->interp_head_addr != 0);
        uint64_t interp = read_word(pid, t->interp_head_addr);
        assert_int_equal(interp, tr->interp);
        uint64_t tstate_head = read_word(pid, interp + 8); /* interp->tstate_head */
        assert_int_equal(tstate_head, tr->tstate);
        uint64_t back = read_word(pid, tstate_head + (mm < 0x0300 ? 8 : 16)); /* tstate->interp */
        assert_int_equal(back, interp);
        if (mm == 0x0306 && !stripped) {
                /* The only thread was the last to hold the GIL; it is sleeping now. */
                assert_int_equal(read_word(pid, t->gil_last_holder_addr), tr->tstate);
                uint64_t locked = read_word(pid, t->gil_locked_addr) & 0xffffffffu;
                assert_true(locked == 0 || locked == 1);
        } else {
                assert_int_equal(t->gil_locked_addr, 0);
                assert_int_equal(t->gil_last_holder_addr, 0);
        }
}

/* --- Interpreters on this machine ------------------------------------------------------- */

struct interp_case {
        const char *name;
        const char *pattern; /* glob for the interpreter */
};

static const struct interp_case interp_cases[] = {
    {"pyenv-2.7", "/root/.pyenv/versions/2.7.*/bin/python"},
    {"pyenv-3.6", "/root/.pyenv/versions/3.6.*/bin/python"},
    {"pyenv-3.7", "/root/.pyenv/versions/3.7.*/bin/python"},
    {"pyenv-3.8", "/root/.pyenv/versions/3.8.*/bin/python"},
    {"pyenv-3.9", "/root/.pyenv/versions/3.9.*/bin/python"},
    {"pyenv-3.10", "/root/.pyenv/versions/3.10.*/bin/python"},
    {"pyenv-3.11", "/root/.pyenv/versions/3.11.*/bin/python"},
    {"pyenv-3.12", "/root/.pyenv/versions/3.12.*/bin/python"},
    {"pyenv-3.13", "/root/.pyenv/versions/3.13.*/bin/python"},
    {"debian-3.11-static", "/usr/bin/python3.11"},
};

/* First match of a glob into buf; false when nothing matches. */
static bool find_interpreter(const char *pattern, char *buf, size_t len)
{
        glob_t g;
        bool ok = false;
        if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0 && access(g.gl_pathv[0], X_OK) == 0) {
                snprintf(buf, len, "%s", g.gl_pathv[0]);
                ok = true;
        }
        globfree(&g);
        return ok;
}

static void test_interpreter(void **state)
{
        const struct interp_case *ic = *state;
        char py[PATH_MAX];
        if (!find_interpreter(ic->pattern, py, sizeof(py))) {
                print_message("    %s: not installed, skipped\n", ic->name);
                skip();
        }
        assert_int_equal(child_start(&g_child, exec_python, py), 0);
        struct truth tr;
        assert_int_equal(read_truth(&g_child, &tr), 0);

        struct pyfind_target t;
        char err[512] = "";
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        if (rc != PYFIND_OK)
                print_message("    %s: %s\n", py, err);
        assert_int_equal(rc, PYFIND_OK);
        check_target(g_child.pid, &tr, &t, false);
        /*
         * 3.13+: the interpreter's own file (python*, libpython*) has the
         * .PyRuntime section, found when asked to look there (as for a
         * module built in), not otherwise.
         */
        if ((t.version_hex >> 16) >= 0x030d) {
                uint64_t at = 0, size = 0;
                assert_int_equal(pyfind_object_section(g_child.pid, "_nomodule.", ".PyRuntime",
                                                       true, &at, &size),
                                 0);
                assert_int_equal(at, t.runtime_addr);
                assert_int_equal(pyfind_object_section(g_child.pid, "_nomodule.", ".PyRuntime",
                                                       false, &at, &size),
                                 1);
        }
}

/* --- libpython embedded under another name ------------------------------------------------ */

struct embed_case {
        const char *name;
        const char *pattern; /* glob for the libpython to copy */
        bool delete_after_load;
        bool no_init; /* load it but never call Py_Initialize() */
};

static const struct embed_case embed_cases[] = {
    {"embed-3.12-deleted", "/root/.pyenv/versions/3.12.*/lib/libpython3.12.so.1.0", true, false},
    {"embed-3.9", "/root/.pyenv/versions/3.9.*/lib/libpython3.9.so.1.0", false, false},
    {"embed-2.7", "/root/.pyenv/versions/2.7.*/lib/libpython2.7.so.1.0", false, false},
    /* Before Py_Initialize() no version string exists: .rodata's PY_VERSION must do. */
    {"embed-3.9-uninitialised", "/root/.pyenv/versions/3.9.*/lib/libpython3.9.so.1.0", false, true},
    {"embed-2.7-uninitialised", "/root/.pyenv/versions/2.7.*/lib/libpython2.7.so.1.0", false, true},
};

/* "/root/.pyenv/versions/3.9.18/lib/..." -> 0x030912f0, from the install directory's name. */
static uint32_t version_of_pyenv_path(const char *path)
{
        const char *v = strstr(path, "/versions/");
        uint32_t hex = 0;
        if (!v || pyfind_parse_version(v + 10, strlen(v + 10), &hex) == 0)
                fail_msg("no version in %s", path);
        return hex;
}

struct embed_arg {
        char lib[PATH_MAX];  /* the renamed copy */
        char home[PATH_MAX]; /* PYTHONHOME */
        bool delete_after_load;
        bool no_init;
};

/* In the forked child: load the copy, start Python, run the truth script. */
static void run_embedded(const void *arg)
{
        const struct embed_arg *ea = arg;
        setenv("PYTHONHOME", ea->home, 1);
        void *h = dlopen(ea->lib, RTLD_NOW | RTLD_GLOBAL);
        if (!h)
                _exit(3);
        if (ea->delete_after_load)
                unlink(ea->lib);
        if (ea->no_init) {
                dprintf(1, "loaded\n");
                pause();
                _exit(6);
        }
        void (*init)(void) = (void (*)(void))dlsym(h, "Py_Initialize");
        int (*run)(const char *, void *) =
            (int (*)(const char *, void *))dlsym(h, "PyRun_SimpleStringFlags");
        if (!init || !run)
                _exit(4);
        init();
        run(truth_script, NULL);
        _exit(5);
}

static int copy_file(const char *from, const char *to)
{
        int in = open(from, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return -1;
        int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        if (out < 0) {
                close(in);
                return -1;
        }
        char buf[65536];
        ssize_t r;
        int rc = 0;
        while ((r = read(in, buf, sizeof(buf))) > 0)
                if (write(out, buf, (size_t)r) != r)
                        rc = -1;
        if (r < 0)
                rc = -1;
        close(in);
        close(out);
        return rc;
}

/* The child has loaded `copy` (of `lib`) without starting Python. */
static void check_uninitialised(const char *lib, const char *copy)
{
        char line[16] = "";
        assert_true(read(g_child.out_fd, line, sizeof(line) - 1) > 0);
        assert_string_equal(line, "loaded\n");
        struct pyfind_target t;
        char err[512] = "", vs[32];
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        if (rc != PYFIND_OK)
                print_message("    %s\n", err);
        assert_int_equal(rc, PYFIND_OK);
        pyfind_version_str(&t, vs, sizeof(vs));
        print_message("    %s: version %s (source %d)\n", t.elf_path, vs, t.version_source);
        assert_string_equal(t.elf_path, copy);
        assert_true(t.version_exact);
        assert_int_equal(t.version_source, PYFIND_VSRC_RODATA);
        assert_int_equal(t.version_hex, version_of_pyenv_path(lib));
}

static void test_embedded(void **state)
{
        const struct embed_case *ec = *state;
        char lib[PATH_MAX];
        if (!find_interpreter(ec->pattern, lib, sizeof(lib))) {
                print_message("    %s: not installed, skipped\n", ec->name);
                skip();
        }
        struct embed_arg ea = {.delete_after_load = ec->delete_after_load, .no_init = ec->no_init};
        /* PYTHONHOME is the prefix: strip "/lib/libpython...". */
        snprintf(ea.home, sizeof(ea.home), "%s", lib);
        *strrchr(ea.home, '/') = 0;
        *strrchr(ea.home, '/') = 0;
        snprintf(g_tmpdir, sizeof(g_tmpdir), "/tmp/pyfind-embed-XXXXXX");
        assert_non_null(mkdtemp(g_tmpdir));
        snprintf(ea.lib, sizeof(ea.lib), "%s/libembedded-host.so", g_tmpdir);
        snprintf(g_tmpfile, sizeof(g_tmpfile), "%s", ea.lib);
        assert_int_equal(copy_file(lib, ea.lib), 0);

        assert_int_equal(child_start(&g_child, run_embedded, &ea), 0);
        if (ec->no_init) {
                check_uninitialised(lib, ea.lib);
                return;
        }
        struct truth tr;
        assert_int_equal(read_truth(&g_child, &tr), 0);
        /* The truth's "shared" looks for "libpython" in the maps; the copy is not named so. */
        tr.shared = 1;
        struct pyfind_target t;
        char err[512] = "";
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        if (rc != PYFIND_OK)
                print_message("    %s: %s\n", ec->name, err);
        assert_int_equal(rc, PYFIND_OK);
        assert_string_equal(t.elf_path, ea.lib);
        check_target(g_child.pid, &tr, &t, false);
}

/* --- Stripped libpython: objcopy --strip-all drops .symtab (interp_head, gil_*), keeps .dynsym --
 */

struct strip_case {
        const char *name;
        const char *python; /* glob for the interpreter */
        const char *lib;    /* glob for its libpython */
};

static const struct strip_case strip_cases[] = {
    {"stripped-2.7", "/root/.pyenv/versions/2.7.*/bin/python",
     "/root/.pyenv/versions/2.7.*/lib/libpython2.7.so.1.0"},
    {"stripped-3.6", "/root/.pyenv/versions/3.6.*/bin/python",
     "/root/.pyenv/versions/3.6.*/lib/libpython3.6m.so.1.0"},
    {"stripped-3.9", "/root/.pyenv/versions/3.9.*/bin/python",
     "/root/.pyenv/versions/3.9.*/lib/libpython3.9.so.1.0"},
};

struct strip_arg {
        char python[PATH_MAX];
        const char *libdir;
};

/* pyenv's RUNPATH yields to LD_LIBRARY_PATH, so the stripped copy is the one loaded. */
static void exec_python_libdir(const void *arg)
{
        const struct strip_arg *sa = arg;
        setenv("LD_LIBRARY_PATH", sa->libdir, 1);
        execl(sa->python, sa->python, "-c", truth_script, (char *)NULL);
}

/* Exit status of `objcopy --strip-all from to`; 127 when there is no objcopy. */
static int strip_copy(const char *from, const char *to)
{
        pid_t pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                execlp("objcopy", "objcopy", "--strip-all", from, to, (char *)NULL);
                _exit(127);
        }
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
                return -1;
        return WEXITSTATUS(st);
}

static void test_stripped(void **state)
{
        const struct strip_case *sc = *state;
        struct strip_arg sa;
        char lib[PATH_MAX];
        if (!find_interpreter(sc->python, sa.python, sizeof(sa.python)) ||
            !find_interpreter(sc->lib, lib, sizeof(lib))) {
                print_message("    %s: not installed, skipped\n", sc->name);
                skip();
        }
        snprintf(g_tmpdir, sizeof(g_tmpdir), "/tmp/pyfind-strip-XXXXXX");
        assert_non_null(mkdtemp(g_tmpdir));
        snprintf(g_tmpfile, sizeof(g_tmpfile), "%s/%s", g_tmpdir, strrchr(lib, '/') + 1);
        int rc = strip_copy(lib, g_tmpfile);
        if (rc == 127) {
                print_message("    no objcopy, skipped\n");
                skip();
        }
        assert_int_equal(rc, 0);
        sa.libdir = g_tmpdir;

        assert_int_equal(child_start(&g_child, exec_python_libdir, &sa), 0);
        struct truth tr;
        assert_int_equal(read_truth(&g_child, &tr), 0);
        struct pyfind_target t;
        char err[512] = "";
        rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        if (rc != PYFIND_OK)
                print_message("    %s: %s\n", sc->name, err);
        assert_int_equal(rc, PYFIND_OK);
        assert_string_equal(t.elf_path, g_tmpfile);
        check_target(g_child.pid, &tr, &t, true);
        /* No "version" buffer symbol any more: found by scanning .bss/.data. */
        assert_int_equal(t.version_source, PYFIND_VSRC_VERSION_STRING);
}

/* --- A stripped interpreter: only a .PyRuntime section with _Py_DebugOffsets ------------- */

static void run_fake_module(const void *arg)
{
        void *h = dlopen(arg, RTLD_NOW);
        void *(*where)(void) = h ? (void *(*)(void))dlsym(h, "fake_runtime_address") : NULL;
        if (!where)
                _exit(3);
        dprintf(1, "%llu\n", (unsigned long long)(uintptr_t)where());
        pause();
}

/* Start a child that loads the fake module named by env var `var`; returns its runtime address. */
static uint64_t start_fake(const char *var, const char **path)
{
        *path = getenv(var);
        if (!*path || access(*path, R_OK) != 0) {
                print_message("    %s not set: fake interpreter modules not built, skipped\n", var);
                skip();
        }
        assert_int_equal(child_start(&g_child, run_fake_module, *path), 0);
        char line[64] = "";
        ssize_t n = read(g_child.out_fd, line, sizeof(line) - 1);
        assert_true(n > 0);
        line[n] = 0;
        return strtoull(line, NULL, 10);
}

static void test_fake_section_313t(void **state)
{
        const char *path;
        uint64_t addr = start_fake("PYFLAME_TEST_FAKEPY_313T", &path);
        struct pyfind_target t;
        char err[512] = "", vs[32];
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        if (rc != PYFIND_OK)
                print_message("    %s\n", err);
        assert_int_equal(rc, PYFIND_OK);
        assert_string_equal(t.elf_path, path);
        assert_int_equal(t.runtime_addr, addr);
        assert_true(t.runtime_from_section);
        assert_true(t.runtime_size >= 24);
        assert_true(t.shared);
        assert_true(t.version_exact);
        assert_int_equal(t.version_hex, 0x030d00f0);
        assert_int_equal(t.version_source, PYFIND_VSRC_DEBUG_OFFSETS);
        assert_true(t.free_threaded);
        pyfind_version_str(&t, vs, sizeof(vs));
        assert_string_equal(vs, "3.13.0t");
}

static void test_fake_section_unsupported(void **state)
{
        uint64_t addr;
        const char *path;
        addr = start_fake("PYFLAME_TEST_FAKEPY_316", &path);
        (void)addr;
        struct pyfind_target t;
        memset(&t, 0xa5, sizeof(t));
        struct pyfind_target before = t;
        char err[512] = "";
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        print_message("    %s\n", err);
        assert_int_equal(rc, PYFIND_UNSUPPORTED);
        assert_non_null(strstr(err, "3.16.0"));
        assert_non_null(strstr(err, "2.7 and 3.6 to 3.15"));
        assert_memory_equal(&t, &before, sizeof(t)); /* not clobbered on failure */
}

/* A child that loads the fake _asyncio module and prints where its section and symbol are. */
static void run_fake_asyncio(const void *arg)
{
        void *h = dlopen(arg, RTLD_NOW);
        void *(*debug)(void) = h ? (void *(*)(void))dlsym(h, "fake_debug_address") : NULL;
        void *(*tasks)(void) = h ? (void *(*)(void))dlsym(h, "fake_all_tasks_address") : NULL;
        if (!debug || !tasks)
                _exit(3);
        dprintf(1, "%llu %llu\n", (unsigned long long)(uintptr_t)debug(),
                (unsigned long long)(uintptr_t)tasks());
        pause();
}

/* An extension module's section (3.14's .AsyncioDebug) and local symbol (3.6's all_tasks). */
static void test_object_section_symbol(void **state)
{
        (void)state;
        const char *path = getenv("PYFLAME_TEST_FAKE_ASYNCIO");
        if (!path || access(path, R_OK) != 0) {
                print_message(
                    "    PYFLAME_TEST_FAKE_ASYNCIO not set: fake module not built, skipped\n");
                skip();
        }
        assert_int_equal(child_start(&g_child, run_fake_asyncio, path), 0);
        char line[128] = "";
        ssize_t n = read(g_child.out_fd, line, sizeof(line) - 1);
        assert_true(n > 0);
        line[n] = 0;
        unsigned long long want_debug = 0, want_tasks = 0;
        assert_int_equal(sscanf(line, "%llu %llu", &want_debug, &want_tasks), 2);
        uint64_t at = 0, size = 0, sym = 0;
        assert_int_equal(
            pyfind_object_section(g_child.pid, "_asyncio.", ".AsyncioDebug", true, &at, &size), 0);
        assert_int_equal(at, want_debug);
        assert_int_equal(size, 64);
        assert_int_equal(pyfind_object_symbol(g_child.pid, "_asyncio.", "all_tasks", &sym), 0);
        assert_int_equal(sym, want_tasks);
        /* Not there: no such file, no such section, no such symbol. */
        assert_int_equal(
            pyfind_object_section(g_child.pid, "_nomodule.", ".AsyncioDebug", true, &at, &size), 1);
        assert_int_equal(
            pyfind_object_section(g_child.pid, "_asyncio.", ".NoSuch", true, &at, &size), 1);
        assert_int_equal(pyfind_object_symbol(g_child.pid, "_asyncio.", "no_such_symbol", &sym), 1);
        assert_true(pyfind_object_symbol(-1, "_asyncio.", "all_tasks", &sym) < 0);
}

/* --- Startup, non-Python, dead and forbidden processes ----------------------------------- */

static void exec_traced(const void *arg)
{
        const char *py = arg;
        ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        execl(py, py, "-c", "pass", (char *)NULL);
}

/* Start `py` stopped right after execve, before the dynamic loader has run. */
static void start_at_exec(const char *py)
{
        assert_int_equal(child_start(&g_child, exec_traced, py), 0);
        int st;
        assert_int_equal(waitpid(g_child.pid, &st, 0), g_child.pid);
        assert_true(WIFSTOPPED(st));
}

static void test_not_ready_before_loader(void **state)
{
        char py[PATH_MAX];
        if (!find_interpreter("/root/.pyenv/versions/3.12.*/bin/python", py, sizeof(py)) &&
            !find_interpreter("/root/.pyenv/versions/3.*/bin/python", py, sizeof(py)))
                skip();
        start_at_exec(py);
        struct pyfind_target t;
        char err[512] = "";
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        print_message("    %s\n", err);
        assert_int_equal(rc, PYFIND_NOT_READY);
        assert_non_null(strstr(err, "libpython"));
}

static void test_static_found_before_loader(void **state)
{
        if (access("/usr/bin/python3.11", X_OK) != 0)
                skip();
        start_at_exec("/usr/bin/python3.11");
        struct pyfind_target t;
        char err[512] = "";
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        if (rc != PYFIND_OK)
                print_message("    %s\n", err);
        assert_int_equal(rc, PYFIND_OK);
        assert_false(t.shared);
        assert_int_equal(t.load_bias, 0);
        assert_int_equal(t.version_source, PYFIND_VSRC_PY_VERSION);
        assert_int_equal(t.version_hex >> 16, 0x030b);
}

static void exec_sleep(const void *arg)
{
        execlp("sleep", "sleep", "600", (char *)NULL);
}

/* Start `sleep` and wait (bounded) until the exec has happened. */
static void start_sleep(void)
{
        assert_int_equal(child_start(&g_child, exec_sleep, NULL), 0);
        char path[64], exe[PATH_MAX];
        snprintf(path, sizeof(path), "/proc/%d/exe", (int)g_child.pid);
        for (int i = 0; i < 5000; i++) {
                ssize_t n = readlink(path, exe, sizeof(exe) - 1);
                if (n > 0) {
                        exe[n] = 0;
                        if (strstr(exe, "sleep"))
                                return;
                }
                usleep(1000);
        }
        fail_msg("sleep did not start");
}

static void test_not_python(void **state)
{
        start_sleep();
        struct pyfind_target t;
        char err[512] = "";
        int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
        print_message("    %s\n", err);
        assert_int_equal(rc, PYFIND_NOT_PYTHON);
        assert_non_null(strstr(err, "(sleep) does not look like CPython"));
}

static void test_no_process(void **state)
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                _exit(0);
        assert_int_equal(waitpid(pid, NULL, 0), pid);
        struct pyfind_target t;
        char err[512] = "";
        assert_int_equal(pyfind_target(pid, &t, err, sizeof(err)), PYFIND_NO_PROCESS);
        print_message("    %s\n", err);
        assert_int_equal(pyfind_target(0, &t, err, sizeof(err)), PYFIND_NO_PROCESS);
        assert_int_equal(pyfind_target(-5, &t, err, sizeof(err)), PYFIND_NO_PROCESS);
}

static void test_permission(void **state)
{
        if (geteuid() != 0) {
                print_message("    needs root to drop to another user, skipped\n");
                skip();
        }
        start_sleep();
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(p[0]);
                if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(100);
                struct pyfind_target t;
                char err[512] = "";
                int rc = pyfind_target(g_child.pid, &t, err, sizeof(err));
                if (write(p[1], err, strlen(err)) < 0)
                        _exit(101);
                _exit(-rc);
        }
        close(p[1]);
        char err[600] = "";
        ssize_t n = read(p[0], err, sizeof(err) - 1);
        close(p[0]);
        err[n > 0 ? n : 0] = 0;
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        print_message("    %s\n", err);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), -PYFIND_PERMISSION);
        assert_non_null(strstr(err, "CAP_SYS_PTRACE"));
        assert_non_null(strstr(err, "ptrace_scope"));
        assert_non_null(strstr(err, "--cap-add SYS_PTRACE"));
}

/* --- Parsers ------------------------------------------------------------------------------ */

static void test_parse_version(void **state)
{
        struct {
                const char *s;
                size_t consumed;
                uint32_t hex;
        } cases[] = {
            {"3.9.18", 6, 0x030912f0},
            {"3.13.0rc1", 9, 0x030d00c1},
            {"3.14.0a7+", 9, 0x030e00a7},
            {"2.7.18 (default", 6, 0x020712f0},
            {"3.8.0+cinder", 12, 0x030800f0},
            {"3.12.0b4", 8, 0x030c00b4},
            {"4.0.0", 0, 0},
            {"3.9", 0, 0},
            {"3.9.x", 0, 0},
            {"3.123.1", 0, 0},
            {"3.11.2c", 0, 0},
            {"3.11.2r1", 0, 0},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint32_t hex = 0;
                size_t n = pyfind_parse_version(cases[i].s, strlen(cases[i].s), &hex);
                assert_int_equal(n, cases[i].consumed);
                if (n)
                        assert_int_equal(hex, cases[i].hex);
        }
}

static void test_scan_version_string(void **state)
{
        static const char good[] =
            "junk\0\0003.9.18 (main, Jan  1 2024, 00:00:00) \n[GCC 12.2.0]\0";
        uint32_t hex = 0;
        assert_int_equal(pyfind_scan_version_string(good, sizeof(good), &hex), 0);
        assert_int_equal(hex, 0x030912f0);

        /* A version inside other text loses to one that starts a string. */
        static const char two[] = "Python 3.2.0 (x) y\0003.10.13 (main, Jan  1 2024) [GCC]\0";
        assert_int_equal(pyfind_scan_version_string(two, sizeof(two), &hex), 0);
        assert_int_equal(hex, 0x030a0df0);

        static const char bare[] = "\0003.9.18\0\0";
        assert_int_equal(pyfind_scan_version_string(bare, sizeof(bare), &hex), -ENOENT);
        static const char binary[] = "\0003.9.18 (main\x01\x02) x\0";
        assert_int_equal(pyfind_scan_version_string(binary, sizeof(binary), &hex), -ENOENT);
        /* No NUL within the buffer: truncated, not accepted. */
        static const char cut[] = {'3', '.', '9', '.', '1', ' ', '(', 'm', ')', ' '};
        assert_int_equal(pyfind_scan_version_string(cut, sizeof(cut), &hex), -ENOENT);
        char big[1000];
        memset(big, 'x', sizeof(big));
        memcpy(big, "3.9.1 (", 7);
        big[sizeof(big) - 1] = 0;
        assert_int_equal(pyfind_scan_version_string(big, sizeof(big), &hex), -ENOENT);
}

static void test_parse_python_name(void **state)
{
        int ma, mi;
        char fl[8];
        bool lib;
        assert_true(
            pyfind_parse_python_name("libpython3.13t.so.1.0", &ma, &mi, fl, sizeof(fl), &lib));
        assert_int_equal(ma, 3);
        assert_int_equal(mi, 13);
        assert_string_equal(fl, "t");
        assert_true(lib);
        assert_true(pyfind_parse_python_name("libpython3.6m.so", &ma, &mi, fl, sizeof(fl), &lib));
        assert_string_equal(fl, "m");
        assert_true(pyfind_parse_python_name("libpython3.12td.so", &ma, &mi, fl, sizeof(fl), &lib));
        assert_string_equal(fl, "td");
        assert_true(pyfind_parse_python_name("python3.11", &ma, &mi, fl, sizeof(fl), &lib));
        assert_false(lib);
        assert_int_equal(mi, 11);
        assert_true(pyfind_parse_python_name("python2.7-dbg", &ma, &mi, fl, sizeof(fl), &lib));
        assert_int_equal(ma, 2);
        assert_false(pyfind_parse_python_name("python3", &ma, &mi, fl, sizeof(fl), &lib));
        assert_false(pyfind_parse_python_name("libpython3.so", &ma, &mi, fl, sizeof(fl), &lib));
        assert_false(pyfind_parse_python_name("pythonista", &ma, &mi, fl, sizeof(fl), &lib));
        assert_false(pyfind_parse_python_name("libpython3.12.a", &ma, &mi, fl, sizeof(fl), &lib));
}

static void test_version_str(void **state)
{
        struct pyfind_target t = {.version_hex = 0x030c01f0, .version_exact = true};
        char b[32];
        pyfind_version_str(&t, b, sizeof(b));
        assert_string_equal(b, "3.12.1");
        t.version_hex = 0x030e00c2;
        t.free_threaded = true;
        pyfind_version_str(&t, b, sizeof(b));
        assert_string_equal(b, "3.14.0rc2t");
        t.version_hex = 0x020700f0;
        t.version_exact = false;
        t.free_threaded = false;
        t.debug_build = true;
        pyfind_version_str(&t, b, sizeof(b));
        assert_string_equal(b, "2.7d");
}

/* --- procfs ------------------------------------------------------------------------------- */

static pid_t my_tid(void)
{
        return (pid_t)syscall(SYS_gettid);
}

static void test_procfs_parse_stat(void **state)
{
        static const char a[] = "1234 (a) b (c) S 1 2 3 4";
        assert_int_equal(procfs_parse_stat_state(a, strlen(a)), 'S');
        static const char b[] = "9 (x) R (y) D 0 0";
        assert_int_equal(procfs_parse_stat_state(b, strlen(b)), 'D');
        static const char c[] = "5 (python3) R 1 5 5 0 -1";
        assert_int_equal(procfs_parse_stat_state(c, strlen(c)), 'R');
        /* Only `len` bytes count: the ')' after them is not seen. */
        assert_int_equal(procfs_parse_stat_state(c, 13), 'R');
        assert_int_equal(procfs_parse_stat_state(c, 12), -EINVAL);
        static const char d[] = "5 (x)";
        assert_int_equal(procfs_parse_stat_state(d, strlen(d)), -EINVAL);
        static const char e[] = "no parens at all";
        assert_int_equal(procfs_parse_stat_state(e, strlen(e)), -EINVAL);
        static const char f[] = "5 (x) 1 2";
        assert_int_equal(procfs_parse_stat_state(f, strlen(f)), -EINVAL);
        assert_int_equal(procfs_parse_stat_state("", 0), -EINVAL);
        /* The thread count, field 20, after a comm with spaces and parentheses. */
        static const char g[] = "77 (a) b (c) S 1 77 77 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 "
                                "12 0 3000 1000 200\n";
        assert_int_equal(procfs_parse_stat_threads(g, strlen(g)), 12);
        static const char h[] = "77 (a) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 12";
        assert_int_equal(procfs_parse_stat_threads(h, strlen(h)), 12); /* the text ends there */
        assert_int_equal(procfs_parse_stat_threads(h, strlen(h) - 3), -EINVAL); /* cut before */
        assert_int_equal(procfs_parse_stat_threads(c, strlen(c)), -EINVAL);
        assert_int_equal(procfs_parse_stat_threads("", 0), -EINVAL);
        static const char zero[] = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 0 0 1";
        assert_int_equal(procfs_parse_stat_threads(zero, strlen(zero)), -EINVAL);
        /* This very thread's, as the stopper reads it: as many as /proc lists. */
        int fd = procfs_thread_open(getpid(), my_tid());
        assert_true(fd >= 0);
        int count = 0;
        assert_int_equal(procfs_thread_stat(fd, &count), 'R');
        pid_t *tids = NULL;
        assert_int_equal(count, procfs_list_tids(getpid(), &tids));
        free(tids);
        close(fd);
}

static void test_procfs_parse_syscall(void **state)
{
        (void)state;
        static const char a[] = "230 0x0 0x0 0x7ffd430c25b0 0x0 0x0 0x7f4b 0x7ffd4 0x7f4bb\n";
        assert_int_equal(procfs_parse_syscall(a, strlen(a)), 1);
        static const char b[] = "-1 0x7ffd430c25b0 0x558e314bc2d8\n";
        assert_int_equal(procfs_parse_syscall(b, strlen(b)), 0);
        assert_int_equal(procfs_parse_syscall("running\n", 8), 0);
        assert_int_equal(procfs_parse_syscall("0 0x1 0x2", 9), 1); /* read(2) is call 0 */
        assert_int_equal(procfs_parse_syscall("", 0), -EINVAL);
        assert_int_equal(procfs_parse_syscall("x1 2", 4), -EINVAL);
        /* Only `len` bytes count. */
        assert_int_equal(procfs_parse_syscall("230", 1), 1);
}

/* A child that sleeps in nanosleep() or spins, held by a ptrace interrupt as --blocking does. */
static int held_child_in_syscall(bool sleeps)
{
        /*
         * The child says it runs before it is held: a child that has not
         * run yet (on a busy machine it may wait for a CPU for long) is
         * still inside the fork, as /proc says, not where the test wants it.
         */
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        pid_t c = fork();
        assert_true(c >= 0);
        if (c == 0) {
                close(ready[0]);
                if (write(ready[1], "r", 1) != 1)
                        _exit(1);
                for (;;) {
                        struct timespec ts = {0, 200000000};
                        if (sleeps)
                                nanosleep(&ts, NULL);
                }
        }
        close(ready[1]);
        char byte;
        assert_int_equal(read(ready[0], &byte, 1), 1);
        close(ready[0]);
        struct timespec settle = {0, 50000000};
        nanosleep(&settle, NULL);
        int rc = -1;
        if (ptrace(PTRACE_SEIZE, c, NULL, NULL) == 0 &&
            ptrace(PTRACE_INTERRUPT, c, NULL, NULL) == 0) {
                int st;
                if (waitpid(c, &st, __WALL) == c)
                        rc = procfs_thread_in_syscall(c, c);
                ptrace(PTRACE_DETACH, c, NULL, NULL);
        } else {
                rc = -errno;
        }
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        return rc;
}

static void test_procfs_thread_in_syscall(void **state)
{
        (void)state;
        int asleep = held_child_in_syscall(true);
        if (asleep == -EPERM) {
                skip(); /* no ptrace here (not root, yama) */
                return;
        }
        assert_int_equal(asleep, 1);
        assert_int_equal(held_child_in_syscall(false), 0);
        assert_int_equal(procfs_thread_in_syscall(getpid(), 0x7ffffff0), -ESRCH);
}

static void test_procfs_parse_nspid(void **state)
{
        static const char a[] = "Name:\tx\nTgid:\t1234\nNSpid:\t1234\t7\t1\nNSpgid:\t1\n";
        assert_int_equal(procfs_parse_nspid(a, strlen(a)), 1);
        static const char b[] = "NSpid:\t55\n";
        assert_int_equal(procfs_parse_nspid(b, strlen(b)), 55);
        static const char c[] = "Name:\tx\nPid:\t3\n";
        assert_int_equal(procfs_parse_nspid(c, strlen(c)), -ENOENT);
        static const char d[] = "Name:\tNSpid: 9\nNSpid:\tabc\n";
        assert_int_equal(procfs_parse_nspid(d, strlen(d)), -EINVAL);
        static const char e[] = "NSpid:\t\n";
        assert_int_equal(procfs_parse_nspid(e, strlen(e)), -EINVAL);
        static const char f[] = "NSpid:\t99999999999\n";
        assert_int_equal(procfs_parse_nspid(f, strlen(f)), -EINVAL);
        /* Without a trailing newline and cut short by len. */
        static const char g[] = "NSpid:\t40\t41";
        assert_int_equal(procfs_parse_nspid(g, strlen(g)), 41);
        assert_int_equal(procfs_parse_nspid(g, strlen(g) - 3), 40);
}

static void test_procfs_parse_maps(void **state)
{
        char l1[] = "7f00a000-7f00b000 r-xp 00001000 fe:00 123 /a path/with (x) (deleted)\n";
        struct procfs_mapping m;
        assert_int_equal(procfs_parse_maps_line(l1, strlen(l1), &m), 0);
        assert_int_equal(m.start, 0x7f00a000);
        assert_int_equal(m.end, 0x7f00b000);
        assert_int_equal(m.offset, 0x1000);
        assert_int_equal(m.perms, PROCFS_MAP_READ | PROCFS_MAP_EXEC | PROCFS_MAP_PRIVATE);
        assert_int_equal(m.dev_major, 0xfe);
        assert_int_equal(m.inode, 123);
        assert_true(m.deleted);
        assert_string_equal(m.path, "/a path/with (x)");
        char l2[] = "00400000-00452000 rw-s 00000000 00:00 0 ";
        assert_int_equal(procfs_parse_maps_line(l2, strlen(l2), &m), 0);
        assert_string_equal(m.path, "");
        assert_false(m.deleted);
        assert_int_equal(m.perms, PROCFS_MAP_READ | PROCFS_MAP_WRITE);
        char l3[] = "7ffd-7ffc r--p 0 0:0 0 [stack]\n"; /* end < start */
        assert_int_equal(procfs_parse_maps_line(l3, strlen(l3), &m), -EINVAL);
        char l4[] = "zzzz-7ffc r--p 0 0:0 0\n";
        assert_int_equal(procfs_parse_maps_line(l4, strlen(l4), &m), -EINVAL);
        char l5[] = "1-2 r";
        assert_int_equal(procfs_parse_maps_line(l5, strlen(l5), &m), -EINVAL);
}

static int count_maps(void *ctx, const struct procfs_mapping *m)
{
        int *n = ctx;
        (*n)++;
        return 0;
}

struct blocked_thread {
        int fds[2];
        pid_t tid;
        pthread_mutex_t lock;
        pthread_cond_t cond;
};

static void *blocked_main(void *arg)
{
        struct blocked_thread *bt = arg;
        prctl(PR_SET_NAME, "a) b (c");
        pthread_mutex_lock(&bt->lock);
        bt->tid = my_tid();
        pthread_cond_signal(&bt->cond);
        pthread_mutex_unlock(&bt->lock);
        char c;
        if (read(bt->fds[0], &c, 1) < 0)
                return NULL;
        return NULL;
}

static void test_procfs_threads(void **state)
{
        struct blocked_thread bt = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                    .cond = PTHREAD_COND_INITIALIZER};
        assert_int_equal(pipe(bt.fds), 0);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, blocked_main, &bt), 0);
        pthread_mutex_lock(&bt.lock);
        while (bt.tid == 0)
                pthread_cond_wait(&bt.cond, &bt.lock);
        pthread_mutex_unlock(&bt.lock);

        pid_t *tids = NULL;
        int n = procfs_list_tids(getpid(), &tids);
        assert_true(n >= 2);
        bool main_seen = false, thread_seen = false;
        for (int i = 0; i < n; i++) {
                main_seen |= tids[i] == getpid();
                thread_seen |= tids[i] == bt.tid;
        }
        free(tids);
        assert_true(main_seen && thread_seen);

        /* The blocked thread, named "a) b (c", must read as sleeping within a bounded wait. */
        int fd = procfs_thread_open(getpid(), bt.tid);
        assert_true(fd >= 0);
        int running = 1;
        for (int i = 0; i < 2000 && running == 1; i++) {
                running = procfs_thread_running(fd);
                if (running == 1)
                        usleep(1000);
        }
        assert_int_equal(running, 0);
        assert_int_equal(procfs_thread_state(fd), 'S');
        /* And this thread is running while it reads itself. */
        int self = procfs_thread_open(getpid(), my_tid());
        assert_true(self >= 0);
        assert_int_equal(procfs_thread_running(self), 1);
        close(self);

        assert_int_equal(procfs_host_tid(getpid(), bt.tid), bt.tid);
        assert_int_equal(procfs_ns_tid(getpid(), bt.tid), bt.tid); /* our namespace is its own */
        assert_int_equal(procfs_host_tid(getpid(), getpid()), getpid());
        assert_true(procfs_same_pidns(getpid()));

        assert_int_equal(write(bt.fds[1], "x", 1), 1);
        pthread_join(th, NULL);
        /* Gone: the open fd reports it. */
        assert_int_equal(procfs_thread_state(fd), -ESRCH);
        close(fd);
        assert_int_equal(procfs_host_tid(getpid(), bt.tid), -ENOENT);
        assert_int_equal(procfs_thread_open(getpid(), bt.tid), -ESRCH);
        close(bt.fds[0]);
        close(bt.fds[1]);

        int maps = 0;
        assert_int_equal(procfs_maps_foreach(getpid(), count_maps, &maps), 0);
        assert_true(maps > 5);
        assert_int_equal(procfs_maps_foreach(999999999, count_maps, &maps), -ESRCH);
        assert_int_equal(procfs_list_tids(999999999, &tids), -ESRCH);
}

static void test_procfs_cmdline_comm(void **state)
{
        char buf[4096], comm[64];
        assert_int_equal(procfs_cmdline(getpid(), buf, sizeof(buf)), 0);
        assert_non_null(strstr(buf, "test_pyfind"));
        assert_int_equal(procfs_comm(getpid(), comm, sizeof(comm)), 0);
        assert_non_null(strstr("test_pyfind", comm)); /* comm is the name cut to 15 bytes */
        char tiny[5];
        assert_int_equal(procfs_cmdline(getpid(), tiny, sizeof(tiny)), 0);
        assert_int_equal(strlen(tiny), 4);
        assert_int_equal(procfs_cmdline(999999999, buf, sizeof(buf)), -ESRCH);
}

/* A process that is pid 1 of its own PID namespace: its NSpid maps back to the host pid. */
static void test_procfs_pid_namespace(void **state)
{
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t mid = fork();
        assert_true(mid >= 0);
        if (mid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (unshare(CLONE_NEWPID) < 0)
                        _exit(2);
                pid_t inner = fork();
                if (inner == 0) {
                        pause();
                        _exit(0);
                }
                if (write(p[1], &inner, sizeof(inner)) != sizeof(inner))
                        _exit(3);
                waitpid(inner, NULL, 0);
                _exit(0);
        }
        close(p[1]);
        pid_t inner = 0;
        ssize_t n = read(p[0], &inner, sizeof(inner));
        close(p[0]);
        if (n != sizeof(inner)) {
                int st;
                waitpid(mid, &st, 0);
                print_message("    cannot create a PID namespace here, skipped\n");
                skip();
        }
        pid_t host = procfs_host_tid(inner, 1);
        pid_t ns = procfs_ns_tid(inner, inner);
        pid_t absent = procfs_host_tid(inner, 99999); /* (a sanitizer may add a thread 2) */
        bool same = procfs_same_pidns(inner);
        kill(inner, SIGKILL);
        waitpid(mid, NULL, 0);
        assert_int_equal(host, inner);
        assert_int_equal(ns, 1);
        assert_int_equal(absent, -ENOENT);
        assert_false(same);
}

int main(void)
{
        /* A hung interpreter must not hang the suite. */
        alarm(600);
        enum { N_INTERP = sizeof(interp_cases) / sizeof(interp_cases[0]) };
        enum { N_EMBED = sizeof(embed_cases) / sizeof(embed_cases[0]) };
        enum { N_STRIP = sizeof(strip_cases) / sizeof(strip_cases[0]) };
        struct CMUnitTest tests[N_INTERP + N_EMBED + N_STRIP + 32];
        size_t n = 0;
        for (size_t i = 0; i < N_INTERP; i++)
                tests[n++] = (struct CMUnitTest){interp_cases[i].name, test_interpreter, NULL,
                                                 teardown_child, (void *)&interp_cases[i]};
        for (size_t i = 0; i < N_EMBED; i++)
                tests[n++] = (struct CMUnitTest){embed_cases[i].name, test_embedded, NULL,
                                                 teardown_child, (void *)&embed_cases[i]};
        for (size_t i = 0; i < N_STRIP; i++)
                tests[n++] = (struct CMUnitTest){strip_cases[i].name, test_stripped, NULL,
                                                 teardown_child, (void *)&strip_cases[i]};
        const struct CMUnitTest more[] = {
            cmocka_unit_test_teardown(test_fake_section_313t, teardown_child),
            cmocka_unit_test_teardown(test_fake_section_unsupported, teardown_child),
            cmocka_unit_test_teardown(test_object_section_symbol, teardown_child),
            cmocka_unit_test_teardown(test_not_ready_before_loader, teardown_child),
            cmocka_unit_test_teardown(test_static_found_before_loader, teardown_child),
            cmocka_unit_test_teardown(test_not_python, teardown_child),
            cmocka_unit_test(test_no_process),
            cmocka_unit_test_teardown(test_permission, teardown_child),
            cmocka_unit_test(test_parse_version),
            cmocka_unit_test(test_scan_version_string),
            cmocka_unit_test(test_parse_python_name),
            cmocka_unit_test(test_version_str),
            cmocka_unit_test(test_procfs_parse_stat),
            cmocka_unit_test(test_procfs_parse_syscall),
            cmocka_unit_test(test_procfs_thread_in_syscall),
            cmocka_unit_test(test_procfs_parse_nspid),
            cmocka_unit_test(test_procfs_parse_maps),
            cmocka_unit_test(test_procfs_threads),
            cmocka_unit_test(test_procfs_cmdline_comm),
            cmocka_unit_test(test_procfs_pid_namespace),
        };
        for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++)
                tests[n++] = more[i];
        return _cmocka_run_group_tests("pyfind", tests, n, NULL, NULL);
}

#endif
