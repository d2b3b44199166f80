#!/usr/bin/env python3
"""Keep the shell completions in completions/ true to the commands.

Default part (all of it runs without zsh):
  - every option each command's --help prints (long and short) is offered by
    that command's bash completion (run in `bash --norc`) and named by its zsh
    completion (_arguments specs), and neither offers an option --help does
    not print (except --version / -V, which are checked to work);
  - the values offered for --format, --per and --align are exactly those the
    command accepts (read from its own message for a wrong value), and each
    of them is accepted;
  - bash completes what each argument is: trace files (*.db) and commands at
    pyflame-report's first word, running pids for record's -p, any file for
    -o, "--format=" split at '=', record's spawn mode after "--";
  - `meson install --destdir` puts the files where Debian looks for them,
    and the installed pyflame-diff finds pyflame-report's file beside it.
Part zsh-syntax: `zsh -n` on each zsh file; exit status 77 (skipped) when
zsh is not installed.

Usage: check_completions.py [--part default|zsh-syntax] --completions DIR
         --record BIN --report BIN --diff BIN --meson MESON --build-dir DIR
         --bash-dir DIR --zsh-dir DIR --work DIR
(--bash-dir and --zsh-dir are the install directories, prefix included.)
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys

SKIP = 77
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)
    return ok


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


# ---- what the commands say ----

def help_options(argv):
    """The long and short options a --help text prints, and {option: METAVAR}
    for those it shows with an argument."""
    p = run(argv)
    if not check(p.returncode == 0, f"{' '.join(argv)} exits 0"):
        return set(), {}
    longs = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", p.stdout))
    shorts = set(re.findall(r"^\s+(-[A-Za-z]),\s+--", p.stdout, re.M))
    metavars = dict(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*) ([A-Z]+|N|C)\b", p.stdout))
    return longs | shorts, metavars


def accepted_values(argv_before, option, argv_after):
    """The values `option` accepts, from the command's message for a wrong one."""
    p = run(argv_before + [option, "no-such-value"] + argv_after)
    m = re.search(r"'no-such-value' is not (.*?) \(see", p.stderr)
    if not check(m is not None, f"{option} of {argv_before} names its values: {p.stderr!r}"):
        return set()
    return set(re.findall(r"[a-z]+(?:-[a-z]+)*", m.group(1))) - {"or", "one", "of"}


def value_is_accepted(argv_before, option, value, argv_after):
    p = run(argv_before + [option, value] + argv_after)
    return f"{option}:" not in p.stderr


# ---- bash ----

def bash_complete(files, function, words, cwd, env):
    """COMPREPLY of `function` for the command line `words` (last one is the
    word being completed), with the completion files sourced in bash --norc."""
    script = "".join(f"source {shlex.quote(f)} || exit 3\n" for f in files)
    script += "COMP_WORDS=(" + " ".join(shlex.quote(w) for w in words) + ")\n"
    script += f"COMP_CWORD={len(words) - 1}\n"
    script += f"COMP_LINE={shlex.quote(' '.join(words))}\nCOMP_POINT=${{#COMP_LINE}}\n"
    script += f"COMPREPLY=()\n{function} || exit 4\n"
    script += 'printf "%s\\n" "${COMPREPLY[@]}"\n'
    p = run(["bash", "--norc", "--noprofile", "-c", script], cwd=cwd, env=env)
    check(p.returncode == 0 and p.stderr == "",
          f"bash completion of {words!r} runs cleanly (rc {p.returncode}, stderr {p.stderr!r})")
    return [line for line in p.stdout.split("\n") if line]


# ---- zsh (read, not run: zsh need not be installed) ----

def zsh_definitions(text):
    """Functions `name() {...}` and arrays `name=(...)` of a zsh file."""
    defs = {}
    for m in re.finditer(r"^([\w-]+)\(\) \{\n(.*?)^\}", text, re.M | re.S):
        defs[m.group(1)] = m.group(2)
    for m in re.finditer(r"^[ \t]*(\w+)=\((.*?)\)[ \t]*$", text, re.M | re.S):
        defs[m.group(1)] = m.group(2)
    return defs


def zsh_text(defs, names):
    """The text of the definitions `names` and of those they use, recursively."""
    seen, todo, out = set(), list(names), []
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        out.append(defs[name])
        todo += [n for n in re.findall(r"[\w-]+", defs[name]) if n in defs]
    return "\n".join(out)


def zsh_options(text):
    """Option names that _arguments specs in `text` declare."""
    return set(re.findall(r"(?:^|(?<=['{,)*]))(--?[A-Za-z][A-Za-z0-9-]*)(?=[\[=+,}])", text, re.M))


def zsh_values(text, option):
    m = re.search(re.escape(option) + r"=\[[^\]]*\]:[^:]*:\(([^)]*)\)", text)
    return set(m.group(1).split()) if m else set()


# ---- the parts ----

def part_default(a):
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": a.work, "LC_ALL": "C"}
    bash = os.path.join(a.completions, "bash")
    zsh = os.path.join(a.completions, "zsh")
    f_record = os.path.join(bash, "pyflame-record")
    f_report = os.path.join(bash, "pyflame-report")
    f_diff = os.path.join(bash, "pyflame-diff")
    with open(os.path.join(zsh, "_pyflame-record")) as f:
        zsh_record = f.read()
    with open(os.path.join(zsh, "_pyflame-report")) as f:
        zsh_report_defs = zsh_definitions(f.read())
    with open(os.path.join(zsh, "_pyflame-diff")) as f:
        check(re.search(r"^_pyflame-report \"\$@\"$", f.read(), re.M) is not None,
              "zsh _pyflame-diff hands over to _pyflame-report")
    version = {"--version", "-V"}

    # name: (--help argv, bash files, bash function, words before the option,
    #        zsh text, options offered beyond --help)
    commands = {
        "pyflame-record": ([a.record, "--help"], [f_record], "_pyflame_record",
                           ["pyflame-record"], zsh_record, set()),
        "pyflame-report": ([a.report, "--help"], [f_report], "_pyflame_report",
                           ["pyflame-report"],
                           zsh_text(zsh_report_defs, ["_pyflame_report_report", "_pyflame_version"]),
                           version),
        "pyflame-diff": ([a.diff, "--help"], [f_diff], "_pyflame_report_diff", ["pyflame-diff"],
                         zsh_text(zsh_report_defs, ["_pyflame_report_diff", "_pyflame_version"]),
                         version),
    }
    for sub in ["report", "info", "diff", "merge", "join", "top", "annotate"]:
        commands["pyflame-report " + sub] = (
            [a.report, sub, "--help"], [f_report], "_pyflame_report", ["pyflame-report", sub],
            zsh_text(zsh_report_defs, ["_pyflame_report_" + sub]), set())
    # annotate takes -h like every command, though its --help prints only --help.
    commands["pyflame-report annotate"][5].add("-h")

    # What each argument is, in a directory with one file of each kind.
    files_dir = os.path.join(a.work, "files")
    for name in ["run.db", "notes.txt", "prog.py", "sub/inner.db"]:
        path = os.path.join(files_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()

    for name, (help_argv, files, function, words, ztext, extra) in commands.items():
        wanted, metavars = help_options(help_argv)
        check(len(wanted) >= 3, f"{name} --help lists its options ({sorted(wanted)})")
        offered = set(bash_complete(files, function, words + ["-"], a.work, env))
        for opt in sorted(wanted - offered):
            check(False, f"bash: '{name} -<TAB>' does not offer {opt}, which --help prints")
        for opt in sorted(offered - wanted - extra):
            check(False, f"bash: '{name} -<TAB>' offers {opt}, which --help does not print")
        znamed = zsh_options(ztext)
        for opt in sorted(wanted - znamed):
            check(False, f"zsh: {name} has no spec for {opt}, which --help prints")
        for opt in sorted(znamed - wanted - extra):
            check(False, f"zsh: {name} has a spec for {opt}, which --help does not print")
        # An option's argument is completed as what it is: a FILE is any file,
        # anything else (a number, a time, a pid, a format) is not a file.
        for opt, metavar in sorted(metavars.items()):
            got = set(bash_complete(files, function, words + [opt, ""], files_dir, env))
            if metavar == "FILE":
                check("notes.txt" in got, f"bash: '{name} {opt} <TAB>' offers files: {got}")
            else:
                check(not got & {"run.db", "notes.txt", "sub", "python3"} and not any(
                    g.startswith("-") for g in got),
                    f"bash: '{name} {opt} <TAB>' ({metavar}) offers no files, commands or options: {sorted(got)[:20]}")
        for opt in sorted(extra):  # -h, -V, --version: they print and exit 0
            p = run(help_argv[:-1] + [opt])
            check(p.returncode == 0 and p.stdout and not p.stderr, f"{name} {opt} works")
        print(f"ok: {name}: {len(wanted)} options in --help, bash and zsh")

    # Values: exactly what the command accepts, and each one accepted.
    one, two = ["/nonexistent/a.db"], ["/nonexistent/a.db", "/nonexistent/b.db"]
    out = ["-o", os.path.join(a.work, "never-written.db")]
    values = [  # (zsh function, bash words, argv, option, argv after)
        ("_pyflame_report_report", ["pyflame-report"], [a.report], "--format", one),
        ("_pyflame_report_info", ["pyflame-report", "info"], [a.report, "info"], "--format", one),
        ("_pyflame_report_annotate", ["pyflame-report", "annotate"], [a.report, "annotate"],
         "--format", one),
        ("_pyflame_report_diff", ["pyflame-report", "diff"], [a.report, "diff"], "--format", two),
        ("_pyflame_report_diff", ["pyflame-report", "diff"], [a.diff], "--per", two),
        ("_pyflame_report_merge", ["pyflame-report", "merge"], [a.report, "merge"], "--align",
         out + one),
        ("_pyflame_report_top", ["pyflame-report", "top"], [a.report, "top"], "--by", one),
        ("_pyflame_report_top", ["pyflame-report", "top"], [a.report, "top"], "--sort", one),
    ]
    for zfunction, words, argv, option, after in values:
        real = accepted_values(argv, option, after)
        check(len(real) >= 2, f"{option} of {words} has values ({sorted(real)})")
        for v in sorted(real):
            check(value_is_accepted(argv, option, v, after),
                  f"{' '.join(words)} {option} {v} is accepted")
        for line in (words + [option, ""], words + [option, "=", ""]):
            got = bash_complete([f_report], "_pyflame_report", line, a.work, env)
            check(set(got) == real, f"bash: {line!r} offers {sorted(real)}, not {sorted(got)}")
        zgot = zsh_values(zsh_text(zsh_report_defs, [zfunction]), option)
        check(zgot == real, f"zsh: {zfunction} {option} offers {sorted(real)}, not {sorted(zgot)}")
        print(f"ok: {' '.join(words)} {option}: {' '.join(sorted(real))}")
    got = bash_complete([f_diff], "_pyflame_report_diff", ["pyflame-diff", "--format", "m"],
                        a.work, env)
    check(got == ["markdown"], f"bash: 'pyflame-diff --format m' gives markdown, not {got}")

    pid = str(os.getpid())
    cases = [  # (files, function, words, must offer, must not offer, exactly?)
        ([f_report], "_pyflame_report", ["pyflame-report", "--for"], {"--format"}, set(), True),
        ([f_report], "_pyflame_report", ["pyflame-report", ""],
         {"run.db", "sub", "report", "info", "diff", "merge", "join", "top", "annotate"},
         {"notes.txt", "prog.py"}, True),
        ([f_report], "_pyflame_report", ["pyflame-report", "i"], {"info"}, set(), True),
        ([f_report], "_pyflame_report", ["pyflame-report", "--by-line", ""], {"run.db", "sub"},
         {"notes.txt", "info"}, True),
        ([f_report], "_pyflame_report", ["pyflame-report", "merge", "-o", ""],
         {"run.db", "notes.txt", "prog.py", "sub"}, set(), True),
        ([f_report], "_pyflame_report", ["pyflame-report", "annotate", "--source", "pr"],
         {"prog.py"}, set(), True),
        ([f_report], "_pyflame_report", ["pyflame-report", "--top", ""], set(), set(), True),
        ([f_report], "_pyflame_report", ["pyflame-report", "diff", "--fail-on", ""],
         {"self:", "total:"}, set(), True),
        ([f_diff], "_pyflame_report_diff", ["pyflame-diff", "run.db", "s"], {"sub"}, set(), True),
        ([f_record], "_pyflame_record", ["pyflame-record", "--n"],
         {"--nonblocking", "--no-source", "--no-bpf", "--no-switch-events", "--native",
          "--native-all"}, set(), True),
        ([f_record], "_pyflame_record", ["pyflame-record", "-p", ""], {pid, "1"}, set(), False),
        ([f_record], "_pyflame_record", ["pyflame-record", "--pid", "=", pid], {pid}, set(), False),
        ([f_record], "_pyflame_record", ["pyflame-record", "-p", "1," + pid], {"1," + pid}, set(),
         False),
        ([f_record], "_pyflame_record", ["pyflame-record", "-o", ""],
         {"run.db", "notes.txt", "prog.py", "sub"}, set(), True),
        ([f_record], "_pyflame_record", ["pyflame-record", "-r", ""], set(), set(), True),
        ([f_record], "_pyflame_record", ["pyflame-record", "-q", "--", "python"], {"python3"},
         set(), False),
        ([f_record], "_pyflame_record", ["pyflame-record", "-p", "1", "-fs", "python3", ""],
         {"prog.py", "sub"}, {"notes.txt", "run.db"}, True),
        ([f_record], "_pyflame_record", ["pyflame-record", "--", "python3", "prog.py", ""],
         {"prog.py", "sub"}, set(), True),
    ]
    failed_before = len(failures)
    for files, function, words, must, must_not, exact in cases:
        got = set(bash_complete(files, function, words, files_dir, env))
        ok = got == must if exact else must <= got and not (must_not & got)
        check(ok and not (must_not & got),
              f"bash: {words!r} offers {sorted(must)}{'' if exact else ' among others'}"
              f"{', not ' + str(sorted(must_not)) if must_not else ''}; got {sorted(got)[:20]}")
    if len(failures) == failed_before:
        print(f"ok: {len(cases)} bash command lines complete as expected")

    # Installed where Debian looks, and working from there.
    dest = os.path.join(a.work, "destdir")
    shutil.rmtree(dest, ignore_errors=True)
    p = run([a.meson, "install", "-C", a.build_dir, "--no-rebuild", "--quiet", "--destdir", dest])
    if check(p.returncode == 0, f"meson install --destdir works: {p.stdout[-2000:]}{p.stderr[-2000:]}"):
        inst_bash = dest + os.path.abspath(a.bash_dir)
        inst_zsh = dest + os.path.abspath(a.zsh_dir)
        for cmd in ["pyflame-record", "pyflame-report", "pyflame-diff"]:
            for src, path in [(os.path.join(bash, cmd), os.path.join(inst_bash, cmd)),
                              (os.path.join(zsh, "_" + cmd), os.path.join(inst_zsh, "_" + cmd))]:
                if check(os.path.isfile(path), f"meson install puts {path}"):
                    with open(src, "rb") as f1, open(path, "rb") as f2:
                        check(f1.read() == f2.read(), f"{path} is {src}")
        got = bash_complete([os.path.join(inst_bash, "pyflame-diff")], "_pyflame_report_diff",
                            ["pyflame-diff", "--per", ""], a.work, env)
        check(got == ["samples", "time"], f"installed pyflame-diff completes --per: {got}")
        print(f"ok: installed under {dest}")


def part_zsh_syntax(a):
    zsh = shutil.which("zsh")
    if not zsh:
        print("SKIP: zsh is not installed, so its files are not syntax-checked")
        return SKIP
    for name in ["_pyflame-record", "_pyflame-report", "_pyflame-diff"]:
        path = os.path.join(a.completions, "zsh", name)
        p = run([zsh, "-n", path])
        check(p.returncode == 0 and not p.stderr, f"zsh -n {path}: {p.stderr}")
    if not failures:
        print("ok: zsh -n on every zsh file")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["default", "zsh-syntax"], default="default")
    ap.add_argument("--completions", required=True)
    for name in ["record", "report", "diff", "meson", "build-dir", "bash-dir", "zsh-dir", "work"]:
        ap.add_argument("--" + name)
    a = ap.parse_args()
    if a.part == "default" and not all(vars(a).values()):
        ap.error("the default part needs every option")
    for name in ["record", "report", "diff", "build_dir", "work"]:
        if getattr(a, name):
            setattr(a, name, os.path.abspath(getattr(a, name)))
    rc = part_zsh_syntax(a) if a.part == "zsh-syntax" else part_default(a)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
