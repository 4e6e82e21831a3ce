"""Case records: the values a test stored, their statuses, and the check of a record's fields."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import xxhash

from regression.errors import StoreError
from regression.nodes import tensor_names
from regression.store.files import load_verified

RECORDED = "recorded"
ABSENT = "absent"
NONDETERMINISTIC = "nondeterministic"
"""Recorded, but two recordings at the reference differed: never compared."""
UNCOLLECTED = "does not exist at the reference"
"""Why an ABSENT case is absent where the reference's tests do not collect it (no error)."""


@dataclass(frozen=True)
class Output:
    """One value a test passed to regression.check, under its name."""

    name: str
    value: object


@dataclass(frozen=True)
class CaseRecord:
    """What the reference revision produced for one test case."""

    nodeid: str
    harness: str
    status: str = RECORDED
    reason: str = ""
    outputs: tuple[Output, ...] = field(default_factory=tuple)
    helpers: Mapping[str, str] = field(default_factory=dict)
    """Test code found while recording (helper modules, files the tests read), by name
    relative to the project, with the digest of each: an edit invalidates the case."""


@dataclass(frozen=True)
class StagedCase:
    """A case whose tensors are written and whose record is not yet: see Entry.stage_case."""

    nodeid: str
    body: Mapping[str, object]
    tensor_file: str | None
    fresh: bool
    """Whether this recording made the tensor file (no earlier one had the same bytes)."""


@dataclass(frozen=True)
class StoredHarness:
    """What a stored case was recorded with: the harness digest and its helpers'."""

    digest: str
    helpers: Mapping[str, str]


@dataclass(frozen=True)
class Collection:
    """The regression cases one test file collected at the reference, and the test code that
    decided which (its harness digest and helpers'): while that code is unchanged, the
    working tree must collect each of them too, or the subject's change removed it."""

    file: str
    """The test file, as node ids begin (relative to the rootdir)."""
    harness: str
    helpers: Mapping[str, str]
    cases: tuple[str, ...]
    conditions: str = ""
    """What else decided which cases it collected: pytest's settings file, PYTEST_ADDOPTS
    (a digest, as the check run that stored it found them)."""


def collection_from(body: dict[str, Any], file: str, environment: str, where: str
                    ) -> Collection:
    """A stored collection's body, checked; StoreError when it cannot be trusted."""
    cases, helpers = body.get("cases"), body.get("helpers")
    if body.get("file") != file or body.get("environment") != environment:
        raise StoreError(f"{where} belongs to another test file or environment")
    if not isinstance(body.get("harness"), str) or not isinstance(body.get("conditions"), str) \
            or not isinstance(cases, list) \
            or not all(isinstance(c, str) and c.startswith(f"{file}::") for c in cases) \
            or not isinstance(helpers, dict) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in helpers.items()):
        raise StoreError(f"{where} is malformed: it must hold the file's harness digest, its "
                         "helpers and its cases' node ids")
    return Collection(file, body["harness"], dict(helpers), tuple(cases), body["conditions"])


def case_id(nodeid: str) -> str:
    """The file-name-safe identity of a test case."""
    return xxhash.xxh3_64_hexdigest(nodeid.encode())


TENSOR_FILE = re.compile(r"[0-9a-f]{16}\.[0-9a-f]{16}\.safetensors")


def shape_problem(body: dict[str, Any]) -> str:
    """What is wrong with the fields of a case record, "" when nothing."""
    if body.get("status") not in (RECORDED, ABSENT, NONDETERMINISTIC):
        return f"unknown status {body.get('status')!r}"
    if not isinstance(body.get("harness"), str) or not isinstance(body.get("reason"), str):
        return "harness and reason must be strings"
    helpers = body.get("helpers")
    if not isinstance(helpers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in helpers.items()):
        return "helpers must map file names to digests"
    outputs = body.get("outputs")
    if not isinstance(outputs, list) or not all(
            isinstance(o, dict) and isinstance(o.get("name"), str) and isinstance(o.get("value"),
                                                                                dict)
            for o in outputs):
        return "outputs must be a list of named values"
    if len({o["name"] for o in outputs}) != len(outputs):
        return "two outputs have one name"
    tensors = body.get("tensors")
    if tensors is not None and not (
            isinstance(tensors, dict) and isinstance(tensors.get("digest"), str)
            and isinstance(tensors.get("file"), str) and TENSOR_FILE.fullmatch(tensors["file"])):
        return "bad tensors field"
    return ""


def checked_body(path: Path, nodeid: str, environment: str, mode: int | None = None
                 ) -> tuple[dict[str, Any], set[str]]:
    """A case's record from `path`, checked to decode fully, and its tensor names. `mode`:
    see regular.opened_regular."""
    return checked_fields(load_verified(path, mode), nodeid, environment, str(path))


def checked_fields(body: dict[str, Any], nodeid: str, environment: str, where: str
                   ) -> tuple[dict[str, Any], set[str]]:
    """A case's record body (read from `where`), checked to decode fully, and its tensor
    names."""
    if body.get("nodeid") != nodeid or body.get("environment") != environment:
        raise StoreError(f"{where} belongs to another case or environment")
    problem = shape_problem(body)
    if problem:
        raise StoreError(f"{where} is malformed: {problem}")
    names: set[str] = set()
    for output in body["outputs"]:
        try:
            names.update(tensor_names(output["value"]))
        except StoreError as exc:
            raise StoreError(f"{where} is malformed: output {output['name']!r} {exc}") from None
    return body, names
