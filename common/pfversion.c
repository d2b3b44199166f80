/*
 * pfversion.c - the one version of pyflame: meson's project version, and
 * when built from a git checkout the commit it was built from (git
 * describe, taken at build time). Every command prints it with --version
 * and the recorder stores it in every trace (meta tool_version).
 */
#include <stdio.h>

#include "pfutil.h"
#include "pfversion_git.h"
#include "pyflame-config.h"

const char *pf_version(void)
{
        static char v[96];
        if (!v[0])
                snprintf(v, sizeof(v), "%s%s%s", PYFLAME_VERSION, PF_GIT_DESCRIBE[0] ? "+git." : "",
                         PF_GIT_DESCRIBE);
        return v;
}

void pf_print_version(FILE *out, const char *prog, int format_version)
{
        fprintf(out,
                "%s %s\n"
                "trace format %d\n"
                "CPython %s\n",
                prog, pf_version(), format_version, PYFLAME_CPYTHON);
}
