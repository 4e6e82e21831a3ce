"""invoke explain on the example zoo with a real history: the layer whose computation
changed, and weights that changed without a change of forward code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import Repo, output, stored_files

pytestmark = pytest.mark.slow

CASE = "tests/regression/test_zoo.py::test_forward[vit-tiny]"
SOFTMAX = "        attn = scores.softmax(dim=-1)\n"
HEAD = "        self.head = nn.Linear(width, out_features)\n"


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
    assert "same    DIFF         model.blocks.0.attn (Attention), call 1  <- here" in text
    assert "same    same           model.blocks.0.attn.qkv (Linear), call 1" in text
    assert ("parameters and buffers of the outermost module (model): all 32 bit-identical, as "
            "first called") in text
    assert "outputs: 'forward': float32[2, 10]: 20 of 20 elements differ" in text
    assert zoo.snapshot() == before  # tree, index, HEAD untouched
    assert stored_files(zoo.cache) == cached  # traces go to a temporary folder


def test_explain_names_a_changed_initialisation_as_a_parameter_difference(zoo: Repo) -> None:
    vit = zoo.path / "zoo" / "vit.py"
    original = vit.read_text()
    assert HEAD in original
    vit.write_text(original.replace(HEAD, HEAD + "        nn.init.zeros_(self.head.bias)\n"))
    try:
        done = zoo.invoke("explain", "test_forward and vit-tiny and not clip")
    finally:
        vit.write_text(original)
    text = output(done)
    assert done.returncode == 0, text
    assert f"tracing {CASE} at " in text  # the -k expression matched the one case
    assert ("parameters and buffers of the outermost module (model): 1 of 32 differ, as first "
            "called: weights initialised or loaded differently") in text
    assert "  model.head.bias: float32[10]: 10 of 10 elements differ" in text
    assert "differ: model.head (Linear), call 1\n  its own parameters or buffers differ" in text


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
