/*
 * pyinterps.c - discovery of installed Python interpreters for the tests
 * (see pyinterps.h).
 */
#include "pyinterps.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static int query(struct pyinterp *p)
{
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "'%s' -c 'import sys; print(\"%%d %%d %%d %%d\" %% (sys.version_info[0], "
                 "sys.version_info[1], sys.version_info[2], "
                 "int(bool(getattr(sys, \"_is_gil_enabled\", lambda: 1)() == 0))))' 2>/dev/null",
                 p->path);
        FILE *f = popen(cmd, "r");
        if (!f)
                return -1;
        int n = fscanf(f, "%d %d %d %d", &p->major, &p->minor, &p->micro, &p->free_threaded);
        pclose(f);
        if (n != 4)
                return -1;
        snprintf(p->label, sizeof(p->label), "%d.%d.%d%s %s", p->major, p->minor, p->micro,
                 p->free_threaded ? "t" : "", strncmp(p->path, "/usr/", 5) ? "" : "system");
        return 0;
}

static void add(struct pyinterp *out, size_t max, size_t *n, const char *path)
{
        char real[PATH_MAX];
        if (*n >= max || access(path, X_OK) != 0 || !realpath(path, real))
                return;
        for (size_t i = 0; i < *n; i++) {
                char other[PATH_MAX];
                if (realpath(out[i].path, other) && strcmp(other, real) == 0)
                        return;
        }
        struct pyinterp *p = &out[*n];
        memset(p, 0, sizeof(*p));
        snprintf(p->path, sizeof(p->path), "%s", path);
        if (query(p) == 0)
                (*n)++;
}

static int cmp_name(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t pyinterps_find(struct pyinterp *out, size_t max)
{
        size_t n = 0;
        const char *env = getenv("PYFLAME_TEST_PYTHONS");
        if (env && *env) {
                char *copy = strdup(env), *save = NULL;
                for (char *t = strtok_r(copy, ":", &save); t; t = strtok_r(NULL, ":", &save))
                        add(out, max, &n, t);
                free(copy);
                return n;
        }
        char root[PATH_MAX];
        const char *pr = getenv("PYENV_ROOT");
        const char *home = getenv("HOME");
        if (pr && *pr)
                snprintf(root, sizeof(root), "%s/versions", pr);
        else
                snprintf(root, sizeof(root), "%s/.pyenv/versions", home ? home : "/root");
        DIR *d = opendir(root);
        if (d) {
                char *names[256];
                size_t nn = 0;
                struct dirent *e;
                while ((e = readdir(d)) && nn < 256)
                        if (e->d_name[0] != '.')
                                names[nn++] = strdup(e->d_name);
                closedir(d);
                qsort(names, nn, sizeof(names[0]), cmp_name);
                for (size_t i = 0; i < nn; i++) {
                        char path[PATH_MAX + 300];
                        snprintf(path, sizeof(path), "%s/%s/bin/python", root, names[i]);
                        add(out, max, &n, path);
                        free(names[i]);
                }
        }
        static const char *const sys_pythons[] = {"/usr/bin/python2.7",  "/usr/bin/python3.9",
                                                  "/usr/bin/python3.10", "/usr/bin/python3.11",
                                                  "/usr/bin/python3.12", "/usr/bin/python3.13"};
        for (size_t i = 0; i < sizeof(sys_pythons) / sizeof(sys_pythons[0]); i++)
                add(out, max, &n, sys_pythons[i]);
        return n;
}

int pyinterps_spawn(const struct pyinterp *py, const char *script, pid_t *pid, int *out)
{
        int fds[2];
        if (pipe(fds) < 0)
                return -errno;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        posix_spawn_file_actions_addclose(&fa, fds[0]);
        char *argv[] = {(char *)py->path, "-u", (char *)script, NULL};
        int rc = posix_spawn(pid, py->path, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(fds[1]);
        if (rc != 0) {
                close(fds[0]);
                return -rc;
        }
        *out = fds[0];
        return 0;
}
