"""The facts that can change the bits of a result, and the cache key made from them."""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import xxhash

from regression.config.settings import Settings
from regression.environment.dependencies import Requirement, distribution_requirements, \
    distributions_of, editable_code, editable_source, file_requirements, normalized, \
    project_name, source_files
from regression.environment.dependencies import declared as declared_requirements
from regression.environment.determinism import no_cuda_message
from regression.errors import DeterminismError

FORMAT_VERSION = "6"
"""2: each case stores the digests of the helpers its tests used (older entries lack them).
3: a tensor may be stored as a digest node (older tools would refuse such a record).
4: the key holds the subject's git objects at the reference, not the reference's commit.
5: a namedtuple is stored with its type's name and fields (older records hold a tuple).
6: each test file recorded keeps which cases it collected at the reference (older entries
   do not, so a case the working tree no longer collects would go unseen)."""

# Environment variables that select kernels or code paths in torch, MKL and oneDNN.
KERNEL_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "TORCH_MKLDNN_MATMUL_MIN_DIM",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
)


def environment_parts(settings: Settings, code: str,
                      packages: Sequence[str] | None = None) -> dict[str, str]:
    """Every fact except the harness that the reference's bits depend on, by name.

    `code` is the subject's code at the reference (code_part): its git trees, not the
    commit, so commits that leave the subject alone share one reference.

    `packages` names the packages whose installed versions are in the key, as the process
    that made the job found them (`packages_in` its parts); None reads them from the
    project's files now (key_packages). A recording is handed them: the tool's own reads
    of the working tree would be caught by the recording's watch of it."""
    import torch

    determinism = settings.determinism
    names = [p.name for p in key_packages(settings)] if packages is None else packages
    return {
        "format": FORMAT_VERSION,
        "subject code": code,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "torch": f"{torch.__version__} (git {torch.version.git_version})",
        "packages": _package_versions(names),
        "platform": f"{platform.system().lower()} {platform.machine()}",
        "subject": f"{', '.join(settings.subject_packages)} from {settings.subject_path}",
        "cpu": f"{torch.backends.cpu.get_cpu_capability()}; {_cpu_model()}",
        "math libraries": _math_libraries(torch.__config__.show()),
        "kernel variables": _kernel_variables(os.environ),
        "threads": str(determinism.threads),
        "device": _device(settings.device),
        "determinism": (
            f"seed={determinism.seed} "
            f"deterministic_algorithms={determinism.deterministic_algorithms} tf32=off"
        ),
    }


def code_part(objects: Iterable[tuple[str, str, str]]) -> str:
    """The key's part for the subject's code: each (path, kind, object id) at the reference,
    as revision.subject_objects finds them ("subj tree 1a2b...; util.py blob 3c4d...")."""
    return "; ".join(" ".join(item for item in entry if item) for entry in objects)


def digest(data: bytes | bytearray) -> str:
    """The content hash used everywhere: xxh3, 128 bits, hex."""
    return xxhash.xxh3_128_hexdigest(data)


def content_hasher() -> xxhash.xxh3_128:
    """An incremental digest(): update() it with the bytes in order, then hexdigest()."""
    return xxhash.xxh3_128()


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    """digest() of a file's bytes, read in chunks."""
    hasher = content_hasher()
    with open(path, "rb") as stream:
        while block := stream.read(chunk):
            hasher.update(block)
    return hasher.hexdigest()


def key_of(parts: Mapping[str, str]) -> str:
    """A stable hash of named parts."""
    return digest(json.dumps(dict(parts), sort_keys=True).encode())


def files_digest(root: Path, files: Iterable[Path]) -> str:
    """A hash of the relative names and bytes of `files`, in a stable order."""
    hasher = xxhash.xxh3_128()
    for path in sorted({f.resolve() for f in files}):
        name = path.relative_to(root.resolve()).as_posix() if path.is_relative_to(root.resolve()) \
            else path.as_posix()
        content = path.read_bytes() if path.is_file() else b"<missing>"
        hasher.update(f"{name}\0{len(content)}\0".encode())
        hasher.update(content)
    return hasher.hexdigest()


def differing_parts(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """Lines naming each part whose value differs, for mismatch reports."""
    names = list(dict.fromkeys([*current, *recorded]))
    return [
        f"{name}: recorded {recorded.get(name, '<absent>')!r}, "
        f"now {current.get(name, '<absent>')!r}"
        for name in names
        if recorded.get(name) != current.get(name)
    ]


@dataclass(frozen=True)
class Package:
    """A package whose installed version is part of the key, and why it is."""

    name: str
    """As pip compares names (PEP 503): one spelling, wherever it was read."""
    why: str


def key_packages(settings: Settings) -> list[Package]:
    """The subject's declared dependencies and config.yaml's fingerprint.packages, less its
    fingerprint.exclude_packages, by normalised name; torch has a part of its own."""
    excluded = {normalized(name) for name in (*settings.fingerprint_exclude, "torch")}
    found = {normalized(name): Package(normalized(name), "config.yaml's fingerprint.packages")
             for name in settings.fingerprint_packages}
    requirements, _ = subject_requirements(settings)
    for requirement in requirements:
        found.setdefault(requirement.name, Package(requirement.name,
                                                   f"declared by {requirement.source}"))
    return [found[name] for name in sorted(found) if name not in excluded]


def subject_requirements(settings: Settings) -> tuple[list[Requirement], str]:
    """What the subject requires (not its extras), and where that was read: the installed
    distributions of its packages, else the project's pyproject.toml or setup.cfg when that
    project is named as one of them; and, either way, the repository's runtime requirement
    files (dependencies.is_runtime: requirements.txt, not requirements-dev.txt)."""
    found: list[Requirement] = []
    sources = []
    project = project_name(settings.root)
    for distribution in distributions_of(settings.subject_packages, project):
        found += distribution_requirements(distribution) or []
        sources.append(f"the metadata of {distribution}, installed")
    why_not = ""
    if not sources:
        found, why_not = _project_requirements(settings)
        if not why_not:
            sources.append(f"{project}'s pyproject.toml/setup.cfg (it is not installed)")
    files = file_requirements(settings.root, runtime_only=True)
    found += files
    sources += dict.fromkeys(r.source for r in files)
    required = [r for r in found if not r.optional]
    if not sources:
        return required, f"none read: {why_not}"
    return required, f"read from {', '.join(sources)}" + (f" (not from the project's files: "
                                                          f"{why_not})" if why_not else "")


def _project_requirements(settings: Settings) -> tuple[list[Requirement], str]:
    """The requirements in the project's pyproject.toml or setup.cfg, when that project is
    the subject; else none, and why."""
    name = project_name(settings.root)
    subject = {normalized(package) for package in settings.subject_packages}
    if not name or name not in subject:
        why = f"names the project {name!r}" if name else "names no project"
        return [], (f"{', '.join(settings.subject_packages)} is not installed, and "
                    f"{settings.root.name}'s pyproject.toml/setup.cfg {why}")
    declared = [r for r in declared_requirements(settings.root)
                if r.source in ("pyproject.toml", "setup.cfg")]
    return declared, ""


def packages_in(parts: Mapping[str, str]) -> list[str]:
    """The names of the packages whose versions `parts` hold, read back from the "packages"
    part environment_parts wrote (names hold no space or ';'): what a recording is handed
    instead of reading the project's files."""
    part = parts.get("packages", "none")
    if part == "none":
        return []
    return [entry.split(" ", 1)[0] for entry in part.split("; ")]


def installed_code(found: metadata.Distribution) -> str:
    """What, besides its version, names the code an installed distribution holds: for an
    editable install, the digest of the files of its packages in its source folder, or of
    the whole folder where it names none (source_files; it changes under one version as it
    is edited); else the digest of the files pip installed, as its RECORD
    hashes them (a package rebuilt locally under its old version differs there); "" when
    neither can be read. Installer details (INSTALLER, direct_url.json) are left out."""
    source = editable_source(found)
    hasher = content_hasher()
    if source is not None:
        code = editable_code(found, source)
        files = sorted(path for place in code or [source] for path in (
            source_files(place) if place.is_dir() else [place]))
        for path in files:
            hasher.update(f"{path.relative_to(source).as_posix()}\0{_content_id(path)}\n"
                          .encode())
        return f"editable, {len(files)} files {hasher.hexdigest()[:16]}"  # not where: CI's differs
    record = found.read_text("RECORD") or ""
    hashed = sorted(line for line in record.splitlines()
                    if line.count(",") >= 2 and line.rsplit(",", 2)[1]
                    and ".dist-info/" not in line.split(",", 1)[0])
    if not hashed:
        return ""
    hasher.update("\n".join(hashed).encode())
    return f"files {hasher.hexdigest()[:16]}"


LARGE_FILE = 1 << 20
"""An editable install's file larger than this (a checkpoint, a data set) is named by its
size and time, not read each run."""


def _content_id(path: Path) -> str:
    """A file's digest; a large one's size and modification time; "" when unreadable."""
    try:
        found = path.stat()
        if found.st_size > LARGE_FILE:
            return f"{found.st_size}:{found.st_mtime_ns}"
        return file_digest(path)
    except OSError:
        return ""


def _package_versions(names: Iterable[str]) -> str:
    """Each package's installed version, and what names its code (installed_code)."""
    versions = []
    for name in names:
        try:
            found = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            versions.append(f"{name} <not installed>")
            continue
        code = installed_code(found)
        versions.append(f"{name} {found.version}" + (f" ({code})" if code else ""))
    return "; ".join(versions) or "none"


_CPU_FIELDS = {  # /proc/cpuinfo field -> label in the key; x86 first, then Arm
    "vendor_id": "", "model name": "", "cpu family": "family", "model": "model",
    "stepping": "stepping", "CPU implementer": "implementer", "CPU part": "part",
    "CPU variant": "variant", "CPU revision": "revision",
}
_CPU_FEATURES = ("flags", "Features")  # instruction-set extensions pick MKL/oneDNN paths


def _cpu_model() -> str:
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    described = [f"{label} {fields[name]}".strip() for name, label in _CPU_FIELDS.items()
                 if name in fields]
    described += [f"{name} {digest(fields[name].encode())[:12]}" for name in _CPU_FEATURES
                  if name in fields]
    return "; ".join(described) or platform.processor() or "unknown"


_LIBRARY_PATTERNS = (
    ("BLAS", r"BLAS_INFO=(\w+)"),
    ("LAPACK", r"LAPACK_INFO=(\w+)"),
    ("MKL", r"Math Kernel Library Version ([\w.\-]+)"),
    ("oneDNN", r"(?:MKL-DNN|oneDNN) (v[\w.]+)"),
    ("OpenBLAS", r"OpenBLAS ([\w.]+)"),
)


def _math_libraries(build_config: str) -> str:
    return "; ".join(f"{label} {found.group(1)}" for label, pattern in _LIBRARY_PATTERNS
                     if (found := re.search(pattern, build_config))) or "none"


def _kernel_variables(environ: Mapping[str, str]) -> str:
    return "; ".join(f"{n}={environ[n]}" for n in KERNEL_VARIABLES if n in environ) or "none"


def _device(device: str) -> str:
    """The device part of the key: on a GPU, everything that picks its kernels' bits."""
    import torch

    if device == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise DeterminismError(no_cuda_message())
    props = torch.cuda.get_device_properties(0)
    return (
        f"cuda {props.name} sm_{props.major}{props.minor}; CUDA {torch.version.cuda}; "
        f"cuDNN {torch.backends.cudnn.version()}; "  # type: ignore[no-untyped-call]
        f"cuBLAS {_cublas_version()}; driver {_driver_version()}; "
        "reduced-precision reductions off"
    )


def device_details(device: str) -> list[str]:
    """What `key --explain` shows of the device but the key leaves out: which card of how
    many, its memory and UUID. Two cards of one model give the same bits, so a pool of
    identical GPU runners shares one reference."""
    if device == "cpu":
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", "unknown")
    return [f"not in the key: GPU 0 of {torch.cuda.device_count()} visible, "
            f"{props.total_memory / 2**30:.0f} GiB, UUID {uuid}"]


def _cublas_version() -> str:
    """The version of the cuBLAS library this process loaded (torch's wheels bring their
    own, and pip can swap it without a new torch): asked of the library itself."""
    import ctypes

    path = loaded_library("libcublas.so")
    if not path:
        return "not loaded"
    try:
        library = ctypes.CDLL(path)
        parts = []
        for kind in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            value = ctypes.c_int()
            if library.cublasGetProperty(kind, ctypes.byref(value)) != 0:
                return f"unknown ({Path(path).name})"
            parts.append(str(value.value))
        return ".".join(parts)
    except (OSError, AttributeError):
        return f"unknown ({Path(path).name})"


def loaded_library(prefix: str) -> str:
    """The path of a shared library this process has mapped whose name starts so; ""."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith(prefix):
            return path
    return ""


def _driver_version() -> str:
    """The NVIDIA kernel driver's version (Linux): it compiles PTX for cards that its
    kernels have no binary for, so a driver update can change bits."""
    try:
        return driver_version_in(Path("/proc/driver/nvidia/version").read_text("utf-8"))
    except OSError:
        return "unknown"


def driver_version_in(text: str) -> str:
    """The version in /proc/driver/nvidia/version's text, proprietary or open module."""
    found = re.search(r"Kernel Module(?: for \w+)?\s+(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else "unknown"


def package_lines(settings: Settings) -> list[str]:
    """For `key --explain`: each package whose version is in the key and why, then what
    was read for the subject's dependencies and what is left out."""
    _, source = subject_requirements(settings)
    lines = [f"  {package.name}: {package.why}" for package in key_packages(settings)]
    left_out = ", ".join(settings.fingerprint_exclude) or "none"
    return ["packages in the key, and why:", *(lines or ["  none"]),
            f"  the subject's dependencies: {source}",
            f"  left out: torch (a part of its own); by fingerprint.exclude_packages: "
            f"{left_out}"]
