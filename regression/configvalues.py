"""Checks of single config values: package names, sizes and CPUs, and how messages show them."""

from __future__ import annotations

import difflib
import keyword
import os
import re
import sys
from typing import Any

import yaml

DISTRIBUTION = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
"""A distribution's name as pip and importlib.metadata take it (PEP 508)."""

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?i?b)?", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(value: object) -> int | None:
    """Bytes from an integer or a string like "16 MB"; None when it is neither (or < 0)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    found = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    unit = (found.group(2) or "b").lower() if found else ""
    if found is None or unit not in _UNITS:
        return None
    return int(float(found.group(1)) * _UNITS[unit])


def path_problem(value: str) -> str:
    """Why `value` cannot name a file or folder on any system, or "": the one check of every
    path-valued setting (a NUL byte, which YAML's "\\0" escape writes, or a blank name)."""
    if "\0" in value:
        return (f"{shown(value)} holds a NUL byte, which no file or folder name can hold "
                "(YAML's \"\\0\" escape writes one). Fix: remove it")
    if not value.strip():
        return f"{value!r} is blank, which names no file or folder. Fix: write a path"
    return ""


def closest(name: str, candidates: list[str]) -> str:
    """The candidate `name` is most likely a misspelling of, or ""."""
    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return matches[0] if matches else ""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, as a container or taskset sets it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def shown(value: Any) -> str:
    """`value` for a message, cut short: a bad value can be large."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def quoting_hint(value: Any, kind: type) -> str:
    """What to change when YAML's quoting made a value the wrong type, or ""."""
    if isinstance(value, str) and kind in (int, bool) and _unquoted_is(value, kind):
        return f"; write it without quotes: {value}"
    if kind is str and isinstance(value, bool):
        return "; YAML reads yes, no, on, off, true and false as booleans: quote it"
    if kind is str and isinstance(value, (int, float)):
        return "; YAML reads it as a number: quote it"
    return ""


def _unquoted_is(text: str, kind: type) -> bool:
    """Whether YAML reads `text`, written without quotes, as a value of `kind`."""
    if len(text) > 20 or not text.strip():
        return False
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


TOOL_IMPORTS = {
    "regression": "it is torch-regression itself",
    **dict.fromkeys(("torch", "torchgen", "numpy", "typing_extensions"),
                    "torch-regression imports it with torch"),
    **dict.fromkeys(("pytest", "_pytest", "pluggy", "iniconfig", "py", "pygments", "xdist",
                     "execnet"), "torch-regression runs in pytest, which imports it"),
    **dict.fromkeys(("invoke", "xxhash", "yaml", "_yaml", "safetensors", "filelock"),
                    "torch-regression itself imports it"),
}
"""Top-level packages imported before the tests run: the redirect cannot take them over."""


def name_problem(item: object) -> str:
    """Why `item` is not the name of a top-level package, or ""."""
    if not isinstance(item, str):
        return (f"{shown(item)} is a {type(item).__name__}, not a package name. Fix: write "
                "the name of a package, quoted if YAML would read it otherwise")
    if not item.strip():
        return f"{item!r} is an empty name. Fix: remove it, or write the package's name"
    if "." in item:
        return (f"{item!r} is not a top-level package name (the import redirect works on "
                "whole top-level packages: write `pkg`, not `pkg.sub`)")
    if not item.isidentifier():
        return (f"{item!r} is not a package name Python can import: letters, digits and _, "
                "not starting with a digit (a distribution like 'my-model' is imported as "
                "'my_model')")
    if keyword.iskeyword(item):
        return f"{item!r} is a Python keyword: no package can have that name"
    return ""


def subject_problem(name: str) -> str:
    """Why `name` cannot be a subject package (imported before the redirect), or ""."""
    why = TOOL_IMPORTS.get(name)
    if why is None and name in sys.stdlib_module_names:
        why = "it is a module of Python's standard library"
    if why is None:
        return ""
    return (f"{name!r} cannot be a subject package: {why}, so it is loaded before the import "
            "redirect exists and a recording would use the installed copy, not the "
            "reference's. Fix: list your own packages, the ones this repository holds (e.g. "
            "packages: [mymodel])")
