"""invoke explain on the example zoo with a real history: the layer whose computation
changed, and weights that changed without a change of forward code."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from helpers import Repo, output, stored_files

pytestmark = pytest.mark.slow

CASE = "tests/regression/test_zoo.py::test_forward[vit-tiny]"
SOFTMAX = "        attn = scores.softmax(dim=-1)\n"
HEAD = "        self.head = nn.Linear(width, out_features)\n"
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def zoo(zoo_repo_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """The zoo, then a harmless commit, the attention weights times (1 + 1e-6), and another
    harmless commit."""
    path = tmp_path_factory.mktemp("zoo-explain") / "repo"
    shutil.copytree(zoo_repo_template, path)
    repo = Repo(path, path.parent / "cache")
    layers = path / "zoo" / "layers.py"
    repo.write("zoo/__init__.py", (path / "zoo" / "__init__.py").read_text() + "# harmless\n")
    repo.commit("a harmless edit")
    text = layers.read_text()
    assert SOFTMAX in text
    repo.write("zoo/layers.py", text.replace(SOFTMAX, SOFTMAX.rstrip() + " * (1 + 1e-6)\n"))
    repo.commit("attention weights times (1 + 1e-6)")
    repo.write("zoo/layers.py", layers.read_text() + "# harmless again\n")
    repo.commit("another harmless edit")
    return repo


def test_bisect_then_explain_name_the_commit_and_the_attention_of_the_first_block(
        zoo: Repo) -> None:
    found = zoo.invoke("bisect", "--good", "HEAD~3", "--case", CASE)
    text = output(found)
    assert found.returncode == 0, text
    middle = zoo.git("rev-parse", "HEAD~1")[:12]
    assert "first commit whose outputs differ from good " in text
    assert f"{middle} attention weights times (1 + 1e-6)" in text

    before, cached = zoo.snapshot(), stored_files(zoo.cache)
    done = zoo.invoke("explain", CASE, "--reference", "HEAD~3")
    text = output(done)
    assert done.returncode == 0, text
    assert ("first module whose inputs are bit-identical and outputs differ: "
            "model.blocks.0.attn (Attention), call 1") in text
    assert "same    DIFF           model.blocks.0.attn (Attention), call 1  <- here" in text
    assert "same    same             model.blocks.0.attn.qkv (Linear), call 1" in text
    assert "same    DIFF     model (ViT), call 1" in text  # the calls it was made inside
    assert ("parameters and buffers of the outermost module (model): all 32 bit-identical, as "
            "first called") in text
    assert "outputs: 'forward': float32[2, 10]: 20 of 20 elements differ" in text
    assert zoo.snapshot() == before  # tree, index, HEAD untouched
    assert stored_files(zoo.cache) == cached  # traces go to a temporary folder


@pytest.fixture(scope="module")
def init_change(zoo: Repo, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """explain, with its HTML page, of the head's bias initialised to zeros in the working
    tree (undone after)."""
    page = tmp_path_factory.mktemp("explain-page") / "pages" / "explain.html"
    vit = zoo.path / "zoo" / "vit.py"
    original = vit.read_text()
    assert HEAD in original
    vit.write_text(original.replace(HEAD, HEAD + "        nn.init.zeros_(self.head.bias)\n"))
    try:
        done = zoo.invoke("explain", "test_forward and vit-tiny and not clip", "--html",
                          str(page))
    finally:
        vit.write_text(original)
    return done, page


def test_explain_names_a_changed_initialisation_as_a_parameter_difference(
        init_change: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, page = init_change
    text = output(done)
    assert done.returncode == 0, text
    assert f"tracing {CASE} at " in text  # the -k expression matched the one case
    assert ("parameters and buffers of the outermost module (model): 1 of 32 differ, as first "
            "called: weights initialised or loaded differently") in text
    assert "  model.head.bias: float32[10]: 10 of 10 elements differ" in text
    assert "differ: model.head (Linear), call 1\n  its own parameters or buffers differ" in text
    assert f"wrote {page}: open it in a browser" in text  # a folder it made


def test_explain_html_page_marks_the_module_and_lists_the_weights_that_differ(
        init_change: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, page = init_change
    assert done.returncode == 0, output(done)
    html = page.read_text(encoding="utf-8")
    rows = re.findall(r'<div class="row (\w+)( here)?" id="call-\d+">.*?'
                      r'<span class="name"[^>]*>([^<]+)</span>', html)
    assert len(rows) == 25 and rows[0] == ("diff", "", "model")
    assert [name for _, here, name in rows if here] == ["model.head"]  # marked once
    assert [name for mark, _, name in rows if mark == "diff"] == ["model", "model.head"]
    assert {mark for mark, _, name in rows if name not in ("model", "model.head")} == {"same"}
    assert "<p>1 of 32 differ from the reference's, as first called.</p>" in html
    assert "<td><code>model.head.bias</code></td><td><code>float32[10]: 10 of 10 elements " \
           "differ" in html
    assert html.count("<circle ") == 25  # every call plotted: none is new
    assert f"<pre>{CASE}: traced 25 module calls at the reference " in html


def test_explain_html_page_loads_in_a_headless_browser(
        init_change: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path) -> None:
    """One browser start: the page's DOM as loaded, a screenshot, and the console."""
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        pytest.skip(f"no Chromium here (looked for {', '.join(BROWSERS)}); "
                    "`apt-get install chromium-headless-shell` runs this test")
    done, page = init_change
    assert done.returncode == 0, output(done)
    screenshot = tmp_path / "page.png"
    loaded = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--screenshot={screenshot}", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert loaded.returncode == 0, loaded.stderr
    console = [line for line in loaded.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []  # no error, and nothing the page's policy had to refuse
    here = re.search(r'<div class="row diff here" id="call-\d+">.*?</div>', loaded.stdout)
    assert here is not None and ">model.head</span>" in here.group(0), loaded.stdout[-2000:]
    assert "&larr; here" in here.group(0) or "\u2190 here" in here.group(0)
    image = screenshot.read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", image[16:24]) == (1200, 1600)


def test_explain_refuses_what_is_not_one_case(zoo: Repo) -> None:
    many = zoo.invoke("explain", "vit-tiny")
    assert many.returncode == 2
    assert "-k 'vit-tiny' matches" in many.stderr and "explain traces one" in many.stderr
    assert CASE in many.stderr and "Traceback" not in many.stderr
    none = zoo.invoke("explain", "no_such_model")
    assert none.returncode == 2 and "no regression case matches -k 'no_such_model'" in none.stderr
    wrong = zoo.invoke("explain", "vit and (")
    assert wrong.returncode == 2 and "Wrong expression passed to '-k': vit and (" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    folder = zoo.invoke("explain", CASE, "--html", "zoo")
    assert folder.returncode == 2, output(folder)
    assert ("torch-regression: --html zoo: that is a folder; name a file in it, e.g. --html "
            "zoo/explain.html") in folder.stderr and "tracing" not in folder.stdout
    empty = zoo.invoke("explain", CASE, "--html", "")
    assert empty.returncode == 2
    assert "--html '' is empty (an unset variable in CI?): give a value, or leave --html out" \
        in empty.stderr
    unknown = zoo.invoke("explain", CASE.replace("vit-tiny", "vit-tyni"))
    assert unknown.returncode == 2
    assert f"test_forward[vit-tyni] is not a regression case of this suite; did you mean {CASE}?" \
        in unknown.stderr
    vit = zoo.path / "zoo" / "vit.py"
    original = vit.read_text()
    vit.write_text(original.replace(HEAD, HEAD + "        raise RuntimeError('broken')\n"))
    try:
        broken = zoo.invoke("explain", CASE)
    finally:
        vit.write_text(original)
    assert broken.returncode == 2, output(broken)
    assert f"{CASE} cannot be traced in the working tree: failed: " in broken.stderr
    assert "RuntimeError: broken" in broken.stderr and "Traceback" not in broken.stderr
