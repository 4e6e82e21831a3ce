"""Changes made on purpose: the declarations of regression-changes.yaml, as plain data.

`invoke accept` writes one entry per changed case (its outputs, the size of the change, the
reason and the reference it differs from); `invoke test` hands them to the check run, whose
judge lets a case pass as declared while its change stays within its entry. Read, check,
match, write and prune live here; nothing of pytest or git.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from regression.errors import ConfigError
from regression.outcomes import CHANGED, DECLARED, IDENTICAL, REMOVED, CaseOutcome

if TYPE_CHECKING:
    from regression.config.yamlfile import Lined

FILE = "regression-changes.yaml"
"""At the project root, beside config.yaml: committed with the pull request."""
ROUNDING = "rounding-level"
BEHAVIOUR = "behaviour"
SIZES = (ROUNDING, BEHAVIOUR)
"""The sizes of a change, smallest first: a declared size covers the sizes before it."""
REMOVAL = REMOVED
"""The size of a declared removal: the case is no longer collected (its outputs are [])."""
PRUNE = "invoke accept --prune"
KEYS = ("case", "outputs", "size", "reason", "reference")
HEADER = f"""\
# Regression outputs changed on purpose: one entry per case, sorted, written by
# `invoke accept --reason TEXT` and reviewed with the pull request that changes them.
# `invoke test` passes a case listed here while its change stays within its entry (no
# other output, no bigger size) and fails on any other change. Once the reference holds
# the change, `{PRUNE}` drops the entries that no longer differ.
"""


@dataclass(frozen=True)
class Declaration:
    """One case's change, declared: what may differ from `reference`, how much, and why."""

    case: str
    outputs: tuple[str, ...]
    """The names of the outputs that may differ (those given to regression.check); none
    for a removal."""
    size: str
    """ROUNDING or BEHAVIOUR: the largest change declared; or REMOVAL: the case is gone."""
    reason: str
    reference: str
    """The full SHA of the reference the case was seen to differ from."""
    line: int = 0
    """The line of its entry in the file (1-based); 0 for one not read from a file."""


def size_of(rounding: Iterable[bool]) -> str:
    """The size of a change from its differences' verdicts: rounding-level when every one
    of them is."""
    flags = list(rounding)
    return ROUNDING if flags and all(flags) else BEHAVIOUR


def uncovered(declaration: Declaration, outputs: Sequence[str], size: str) -> str:
    """Why the change (the outputs that differ, its size) goes beyond the declaration; ""
    when the declaration covers it."""
    if declaration.size == REMOVAL:
        return (f"declared removed in {FILE} (line {declaration.line}), but it is collected "
                "and its outputs differ")
    extra = [name for name in outputs if name not in declaration.outputs]
    if extra:
        names = ", ".join(repr(name) for name in extra)
        return (f"the change touches outputs not declared in {FILE} (line "
                f"{declaration.line}): {names}")
    if SIZES.index(size) > SIZES.index(declaration.size):
        return (f"declared {declaration.size} in {FILE} (line {declaration.line}), but now "
                f"{size}")
    return ""


def by_case(declarations: Iterable[Declaration]) -> dict[str, Declaration]:
    return {d.case: d for d in declarations}


def stale(declarations: Iterable[Declaration], outcomes: Iterable[CaseOutcome]
          ) -> list[Declaration]:
    """The declarations whose case this run found identical to the reference: the reference
    holds the change, or it was taken back. A case this run did not judge (another shard,
    not selected) is not stale here."""
    identical = {o.nodeid for o in outcomes if o.outcome == IDENTICAL}
    return [d for d in declarations if d.case in identical]


def unknown(declarations: Iterable[Declaration], cases: set[str], files: set[str],
            root: Path) -> list[Declaration]:
    """The declarations that name no case: their test file is gone, or was collected here
    without the case (which a declared removal may be: the check run judges it)."""
    return [d for d in declarations
            if not (root / d.case.split("::")[0]).is_file()
            or (d.case.split("::")[0] in files and d.case not in cases and d.size != REMOVAL)]


def accepted(existing: Sequence[Declaration], outcomes: Iterable[CaseOutcome], reason: str,
             reference: str) -> tuple[Declaration, ...]:
    """`existing` with an entry for each changed or removed (or already declared) case of
    `outcomes`: a case declared before is declared again, with this reason and what it shows
    now."""
    found = by_case(existing)
    for outcome in outcomes:
        if outcome.outcome == REMOVED:
            found[outcome.nodeid] = Declaration(outcome.nodeid, (), REMOVAL, reason, reference)
        elif outcome.outcome in (CHANGED, DECLARED):
            found[outcome.nodeid] = Declaration(outcome.nodeid, tuple(sorted(outcome.names)),
                                                outcome.size or BEHAVIOUR, reason, reference)
    return tuple(sorted(found.values(), key=lambda d: d.case))


def pruned(existing: Sequence[Declaration], drop: Iterable[Declaration]
           ) -> tuple[Declaration, ...]:
    gone = {d.case for d in drop}
    return tuple(d for d in existing if d.case not in gone)


def render(declarations: Iterable[Declaration]) -> str:
    """The file's text: the header, then one entry per case, sorted by case. Strings are
    quoted as JSON, which YAML reads as they are."""
    lines = [HEADER.rstrip("\n"), "changes:"]
    entries = sorted(declarations, key=lambda d: d.case)
    if not entries:
        lines[-1] = "changes: []"
    for d in entries:
        lines += [f"  - case: {json.dumps(d.case)}",
                  f"    outputs: [{', '.join(json.dumps(name) for name in d.outputs)}]",
                  f"    size: {d.size}",
                  f"    reason: {json.dumps(d.reason)}",
                  f"    reference: {d.reference}"]
    return "\n".join(lines) + "\n"


def write(path: Path, declarations: Sequence[Declaration]) -> None:
    """Write the file; with no declaration left, remove it."""
    if not declarations:
        path.unlink(missing_ok=True)
        return
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(render(declarations), encoding="utf-8")
    temporary.replace(path)


def read(path: Path) -> tuple[Declaration, ...]:
    """The declarations of the file at `path`; none when there is no file. A malformed file,
    an entry that is not whole or a case declared twice is a ConfigError naming the line
    and the fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot be read ({exc}); it must be the UTF-8 text "
                                     "`invoke accept` writes") from None
    return parse(text, str(path))


def parse(text: str, where: str = FILE) -> tuple[Declaration, ...]:
    """The declarations of a file's text (see `read`)."""
    import yaml

    from regression.config.yamlfile import Lined, YamlProblem
    from regression.config.yamlfile import parse as parse_yaml

    try:
        data = parse_yaml(text)
    except YamlProblem as exc:
        raise ConfigError(where, str(exc), exc.key, exc.line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(where, f"is not valid YAML ({getattr(exc, 'problem', exc)}). Fix: "
                          "write it as `invoke accept` does, or delete the file and run "
                          "`invoke accept` again", line=line) from None
    if data is None:
        return ()
    if not isinstance(data, Lined) or set(data) - {"changes"}:
        raise ConfigError(where, "must be a mapping with one key, `changes:`, a list of "
                          "entries. Fix: write it as `invoke accept` does, or delete the file "
                          "and run `invoke accept` again", line=_first_line(data))
    entries = data["changes"] if "changes" in data else []
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ConfigError(where, "must be a list of entries, each beginning `- case:`",
                          "changes", data.line_of("changes"))
    found: dict[str, Declaration] = {}
    for index, entry in enumerate(entries):
        declaration = _entry(entry, where, index, data.line_of("changes"))
        if declaration.case in found:
            raise ConfigError(where, f"{declaration.case} is declared twice, on line "
                              f"{found[declaration.case].line} and on line {declaration.line}. "
                              "Fix: keep one entry per case; delete the other",
                              "changes", declaration.line)
        found[declaration.case] = declaration
    return tuple(found.values())


def _first_line(data: Any) -> int | None:
    """The first line of a mapping's keys; None for anything else."""
    from regression.config.yamlfile import Lined

    if not isinstance(data, Lined):
        return None
    return min(getattr(data, "lines", {}).values(), default=None)


def _require_keys(entry: Lined, where: str, name: str, line: int) -> None:
    """Raise ConfigError unless the entry has exactly the keys of one."""
    extra = [str(key) for key in entry if key not in KEYS]
    if extra:
        raise ConfigError(where, f"unknown key {extra[0]!r}; an entry has the keys "
                          f"{', '.join(KEYS)}. Fix: delete it, or correct its spelling",
                          name, entry.line_of(extra[0]) or line)
    missing = [key for key in KEYS if key not in entry]
    if missing:
        raise ConfigError(where, f"the entry lacks {', '.join(missing)}. Fix: run `invoke "
                          "accept` again for its case, which writes the entry whole", name, line)


def _entry(entry: object, where: str, index: int, list_line: int | None) -> Declaration:
    """One entry, checked: every key present, each of its kind."""
    from regression.config.yamlfile import Lined

    name = f"changes[{index}]"
    if not isinstance(entry, Lined):
        raise ConfigError(where, f"each entry is a mapping with the keys {', '.join(KEYS)}. "
                          "Fix: write it as `invoke accept` does", name, list_line)
    line = entry.line_of("case") or _first_line(entry) or list_line or 0
    _require_keys(entry, where, name, line)

    def text(key: str) -> str:
        value = entry[key]
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(where, f"{key} must be non-empty text, not {value!r}",
                              f"{name}.{key}", entry.line_of(key) or line)
        return value

    case, size, reason, reference = text("case"), text("size"), text("reason"), \
        str(entry["reference"])
    if "::" not in case:
        raise ConfigError(where, f"{case!r} is no case: give its node id as pytest prints it "
                          "(tests/test_x.py::test_y[a])", f"{name}.case", line)
    if size not in (*SIZES, REMOVAL):
        raise ConfigError(where, f"{size!r} is no size; give {', '.join(SIZES)} or {REMOVAL}",
                          f"{name}.size", entry.line_of("size") or line)
    outputs = entry["outputs"]
    if size == REMOVAL and outputs != []:
        raise ConfigError(where, "a removed case has no outputs that may differ: give "
                          "outputs: []", f"{name}.outputs", entry.line_of("outputs") or line)
    if size != REMOVAL and (not isinstance(outputs, list) or not outputs or
                            not all(isinstance(o, str) and o for o in outputs)):
        raise ConfigError(where, "outputs must be a list of the output names that may "
                          "differ, e.g. [\"forward\"]", f"{name}.outputs",
                          entry.line_of("outputs") or line)
    if not reference.strip():
        raise ConfigError(where, "reference must name the commit the case differs from",
                          f"{name}.reference", entry.line_of("reference") or line)
    return Declaration(case, tuple(outputs), size, reason, reference, line)

