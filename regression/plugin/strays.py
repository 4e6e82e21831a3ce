"""Modules and files a recording took from the user's working tree, and what is said of them."""

from __future__ import annotations

from typing import Mapping, Sequence

from regression.errors import StrayImportError


NOTHING_STORED = "Nothing was stored."
SUBJECTS = "; the subject's"
"""How the watch marks a file in a subject package's folder."""


def stray_message(stray: Mapping[str, str], subjects: frozenset[str] = frozenset()) -> str:
    """What is said about modules imported from the working tree, by name, and the fix for
    each kind: `subjects` are the paths of those in a subject package's folder."""
    lines = "\n".join(f"  {name} ({where})" for name, where in stray.items())
    theirs = [where for where in stray.values() if where in subjects]
    beside = sorted({name.split(".")[0] for name, where in stray.items()
                     if where not in subjects})
    fixes = []
    if theirs:
        fixes.append(f"Fix: the subject's own modules ({', '.join(theirs)}), imported from a "
                     "folder put on sys.path: import them by their package name.")
    if beside:
        fixes.append(f"Fix: a module beside the subject is code under test: add "
                     f"{', '.join(beside)} to config.yaml's `subject.packages` (then imported "
                     "from the reference); one that only makes the tests' inputs goes in "
                     "`harness` instead (then part of the cache key).")
    return ("these modules were imported from your working tree while recording at the "
            f"reference, so their current code would pass as the reference:\n{lines}\n"
            + "\n".join(fixes))


def require_own_files(stray: Mapping[str, str], refused: Mapping[str, str],
                      unkeyed: Mapping[str, str] | None = None,
                      packages: Sequence[str] = ()) -> None:
    """Raise StrayImportError, in one message, naming every module (`stray`, by name) and
    every other file (`refused`, by path, with how: "read", "run", "...; the subject's")
    the recording took from the working tree, every file of the reference outside the
    subject's code (`unkeyed`, by path, with how; `packages`: the subject's), and the fix
    for each kind."""
    named = set(stray.values())
    subjects = frozenset(path for path, how in refused.items() if how.endswith(SUBJECTS))
    refused = {path: how for path, how in sorted(refused.items()) if path not in named}
    messages = ([stray_message(stray, subjects)] if stray else []) + \
        ([read_message(refused)] if refused else []) + \
        ([unkeyed_message(unkeyed, packages)] if unkeyed else [])
    if messages:
        raise StrayImportError("\n".join([*messages, NOTHING_STORED]))


METADATA_NAMES = frozenset({"setup.py", "setup.cfg", "pyproject.toml", "PKG-INFO", "VERSION",
                            "version.txt", "MANIFEST.in"})
_CODE = (".py", ".pyc", ".so", ".pyd")
FIXES = {
    "metadata": "the project's metadata: to know the subject's own (its version, its "
                "requirements), install the subject (`pip install -e .`) and ask "
                "importlib.metadata; else list the file in config.yaml's `harness`.",
    "subject": "the subject's files, reached by a path into your working tree: import the "
               "subject by its package name, and read its files relative to its module's "
               "__file__ or to the working folder (the reference's worktree while recording).",
    "code": "code run by its path, outside the subject: import it by its package name, and "
            "add that package to config.yaml's `subject.packages` (then run from the "
            "reference).",
    "data": "a data file the tests read, outside the test folders: list it in config.yaml's "
            "`harness` (its bytes are then part of the cache key).",
}
"""The fix for each kind of file a recording read from the working tree."""


def file_kind(path: str, how: str) -> str:
    """What a file the recording took from the working tree is, as a key of FIXES."""
    name = path.rsplit("/", 1)[-1]
    if name in METADATA_NAMES or (name.startswith("requirements") and name.endswith(".txt")) \
            or path.startswith("requirements/"):
        return "metadata"
    if how.endswith(SUBJECTS):
        return "subject"
    return "code" if name.endswith(_CODE) else "data"


def read_message(refused: Mapping[str, str]) -> str:
    """What is said about files run or read from the working tree, by path, and the fix for
    each kind of file among them."""
    lines = "\n".join(f"  {name} ({how})" for name, how in refused.items())
    kinds = {file_kind(name, how) for name, how in refused.items()}
    fixes = "\n".join(f"Fix: {FIXES[kind]}" for kind in FIXES if kind in kinds)
    return ("these files of your working tree were run or read while recording at the "
            f"reference, so their current content would pass as the reference's:\n{lines}\n"
            f"{fixes}")


def unkeyed_message(unkeyed: Mapping[str, str], packages: Sequence[str]) -> str:
    """What is said about files of the reference, outside the subject's code, that the
    recording ran, read, asked about or listed: the key holds only the subject's code, so a
    commit that changed them alone would reuse this reference."""
    lines = "\n".join(f"  {name} ({how})" for name, how in sorted(unkeyed.items()))
    code = any(how == "run" for how in unkeyed.values())
    data = any(how == "read" for how in unkeyed.values())
    asked = any(how in ("asked about", "listed") for how in unkeyed.values())
    fixes = []
    if code:
        fixes.append("Fix: code run from the reference outside the subject: add its package "
                     "to config.yaml's `subject.packages` (its code is then in the key).")
    if data:
        fixes.append(f"Fix: a data file: move it into a subject package ({', '.join(packages)}"
                     "), whose code and files the key holds; or list it in config.yaml's "
                     "`harness` (both runs then read your working tree's, and its bytes are in "
                     "the key).")
    if asked:
        fixes.append(f"Fix: code that asks whether a file of the reference is there, or lists a "
                     f"folder of it: ask inside a subject package ({', '.join(packages)}), whose "
                     "files the key holds, or in the test folders (both runs then see your "
                     "working tree's); a switch is better an environment variable, which each "
                     "case keeps.")
    return ("these files of the reference were run, read or asked about while recording, "
            "outside the subject's code, which is all of the reference the cache key holds "
            f"(its git trees): a commit that changed only them would reuse this recording:\n"
            f"{lines}\n" + "\n".join(fixes))
