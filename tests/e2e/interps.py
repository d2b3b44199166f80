"""The CPython interpreters the end-to-end tests run against, found once for all.

Every pyenv version under $PYENV_ROOT (default ~/.pyenv) whose name is a
plain X.Y.Z, labelled by it, and Debian's static /usr/bin/python3.11 as
"debian-3.11" when present (and asked for); in version order (Debian's
3.11 before pyenv's 3.11.x).
"""
import glob
import os
import re


def interpreters(debian=True):
    """(label, path) of every CPython we can test here."""
    found = []
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for path in glob.glob(os.path.join(root, "versions", "*", "bin", "python")):
        ver = path.split(os.sep)[-3]
        if re.match(r"^\d+\.\d+\.\d+$", ver):
            found.append((ver, path))
    if debian and os.path.exists("/usr/bin/python3.11"):
        found.append(("debian-3.11", "/usr/bin/python3.11"))
    return sorted(found, key=version_key)


def version_key(item):
    """Sort key of a (label, path): the numbers of its label."""
    return [int(n) for n in re.findall(r"\d+", item[0])] + [item[0].startswith("debian")]
