"""The diagnosis tasks: bisect (since when) and explain (where in the model)."""

from __future__ import annotations

import functools

from invoke.context import Context
from invoke.tasks import task

from regression.cli.common import DEVICE_HELP, REFERENCE_HELP, current_settings, help_if_asked, \
    report_path, require_filled, translated
from regression.run.api import collect
from regression.run.launch import load_before_forks
from regression.run.types import resolve
from regression.store.scratch import scratch_folder

def _bisect(good: str, bad: str, cases: list[str] | None, scan_all: bool) -> None:
    require_filled(("--good", good), ("--bad", bad), ("--case", cases), required="--good")
    from regression.diagnose.bisect import bisect as find_first, scan
    from regression.diagnose.bisect_report import bisection_lines, scan_lines
    from regression.repository.gitcmd import run_git
    from regression.repository.revision import resolve_revision

    settings = current_settings()
    at_good = resolve(settings, good)
    bad_sha = resolve_revision(at_good.repo, settings.revision_for(bad))
    load_before_forks()  # the revisions are good: what every fork loads, loaded once
    search, lines = (scan, scan_lines) if scan_all else (find_first, bisection_lines)
    result = search(collect(at_good), at_good.sha, bad_sha, list(cases or ()), print)

    @functools.cache
    def subject_line(sha: str) -> str:
        return run_git(at_good.repo, "log", "-1", "--format=%s", sha)

    for line in lines(result, subject_line):
        print(line)


@task(help={
    "good": "a revision whose outputs are the ones wanted (tag, branch, SHA, HEAD~n)",
    "bad": "a later revision whose outputs differ (default: HEAD)",
    "case": "judge only this case (a node id); repeat for more. Default: every case whose "
            "outputs differ between good and bad",
    "scan": "record every commit instead, and list each one that changes outputs from the "
            "commit before it (finds changes reverted later in the range)",
    "device": DEVICE_HELP,
}, iterable=["case"])
def bisect(c: Context, good: str, bad: str = "HEAD", case: list[str] | None = None,
           scan: bool = False, device: str | None = None) -> None:
    """Find the first commit after --good that changed each differing case.

    For each case whose outputs differ between good and bad: the first commit after good
    whose outputs of it differ from good's (with --scan: every commit that changed them)."""
    if not help_if_asked(bisect, good, bad):
        translated(lambda: _bisect(good, bad, case, scan), device)


def _explain(case: str, reference: str | None, html: str | None) -> None:
    require_filled(("--case", case), ("--reference", reference), ("--html", html),
                   required="--case")
    from regression.diagnose.explain import explain as compare_traces
    from regression.diagnose.explain_report import explanation_lines
    from regression.diagnose.tracing import pick_case, traced, write_page

    page = None if html is None else report_path("--html", html, "explain.html")
    resolved = resolve(current_settings(), reference)
    load_before_forks()  # the revision is good: what every fork loads, loaded once
    nodeid = pick_case(resolved, case)
    with scratch_folder("trace") as folder:
        at_reference, here = traced(resolved, nodeid, folder, print)
        found = compare_traces(at_reference, here)
        lines = explanation_lines(found, nodeid, resolved.label)
        for line in lines:
            print(line)
        if page is not None:
            write_page(page, nodeid, resolved.label, (at_reference, here), found, lines)
            print(f"wrote {page}: open it in a browser")


@task(auto_shortflags=False, help={
    "case": "the case: a node id as pytest prints it, or a -k expression that matches one "
            "case, e.g. 'test_forward and vit-tiny'",
    "reference": REFERENCE_HELP,
    "device": DEVICE_HELP,
    "html": "also write the calls, a plot of their differences and the report as one "
            "self-contained HTML page to this file",
})
def explain(c: Context, case: str, reference: str | None = None, device: str | None = None,
            html: str | None = None) -> None:
    """Name the first layer whose outputs differ from the reference's.

    The first module call whose inputs are the same at both and whose outputs differ: the
    case runs at the reference and here with every module call traced."""
    if not help_if_asked(explain, case):
        translated(lambda: _explain(case, reference, html), device)
