"""The verdict and explain on histories shaped like real ones: open_clip's switch to
batch-first, fused attention (values near zero, reordered arithmetic), a GELU switched to its
tanh approximation next to it, and timm's init refactor."""

from __future__ import annotations


import pytest
from helpers import CONFIG, Repo, output, tagged_repo

pytestmark = pytest.mark.slow

TOWER = "tests/test_subj.py::test_tower"
MODEL = """\
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
{attention}

class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attn = Attention(width)

    def forward(self, x):
        return x + self.attn(self.norm(x))


class Tower(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.embed, self.head = nn.Linear(8, width), nn.Linear(width, 4)
        self.blocks = nn.Sequential(Block(width), Block(width))
        self.norm = nn.LayerNorm(width)

    def features(self, x):
{features}

    def forward(self, x):
        return self.head(self.features(x))


def create_model() -> Tower:
    torch.manual_seed(0)
    return Tower().eval()


def create_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.GELU({gelu}), nn.Linear(64, 64)).eval()
"""
SEQUENCE_FIRST = {  # (L, N, D) through the blocks, attention in plain arithmetic
    "attention": """\
        x = x.transpose(0, 1).contiguous()  # (L, N, D) -> (N, L, D)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        mixed = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1) @ v
        return self.out(mixed).transpose(0, 1).contiguous()
""",
    "features": """\
        x = self.embed(x).permute(1, 0, 2).contiguous()  # (N, L, D) -> (L, N, D)
        x = self.blocks(x).permute(1, 0, 2).contiguous()
        return self.norm(x)
""",
    "gelu": "",
}
BATCH_FIRST = {  # (N, L, D) throughout, fused attention
    "attention": """\
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.out(F.scaled_dot_product_attention(q, k, v))
""",
    "features": """\
        return self.norm(self.blocks(self.embed(x)))
""",
    "gelu": "approximate='tanh'",
}
TESTS = """\
import torch

import subj


def test_tower(regression):
    model = subj.create_model()
    x = regression.randn(2, 5, 8)
    with torch.no_grad():
        regression.check(model.features(x), name="features")
        regression.check(model(x), name="logits")


def test_mlp(regression):
    model = subj.create_mlp()
    with torch.no_grad():
        regression.check(model(regression.randn(4, 64)), name="out")
"""
INIT = "        self.norm = nn.LayerNorm(width)\n\n    def features"
REFACTOR = """\
        self.norm = nn.LayerNorm(width)
        for block in self.blocks:  # the init refactor: drawn again, another way
            nn.init.trunc_normal_(block.attn.qkv.weight, std=0.02)
            nn.init.trunc_normal_(block.attn.out.weight, std=0.02)
            nn.init.normal_(block.attn.qkv.bias, std=0.02)

    def features"""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """v1 in (L, N, D) with plain attention; then batch-first with fused attention, and the
    MLP's GELU switched to its tanh approximation, in one commit."""
    path = tmp_path_factory.mktemp("histories") / "repo"
    repo = tagged_repo(path, path.parent / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."),
        "subj/__init__.py": MODEL.format(**SEQUENCE_FIRST), "tests/test_subj.py": TESTS})
    repo.write("subj/__init__.py", MODEL.format(**BATCH_FIRST))
    repo.commit("batch first, fused attention; GELU as tanh")
    return repo


def test_reordered_arithmetic_near_zero_reads_as_rounding_next_to_a_real_change(
        history: Repo) -> None:
    done = history.invoke("test")
    text = output(done)
    assert done.returncode == 1, text
    report = text[text.index("'features': float32[2, 5, 64]"):].splitlines()
    assert "at its scale: rounding-level, as reordered arithmetic gives" in report[0], text
    per_element = next(line for line in report if "at the tensor's scale" in line)
    assert float(per_element.split("per element up to ")[1].split()[0]) > 256  # near zero
    mlp = next(line for line in text.splitlines() if "'out': float32[4, 64]" in line)
    assert "at its scale: changed behaviour, far beyond rounding" in mlp, text


def test_explain_names_the_attention_below_a_layout_change(history: Repo) -> None:
    done = history.invoke("explain", TOWER)
    text = output(done)
    assert done.returncode == 0, text
    assert ("first module whose inputs hold the reference's values (in another layout) and "
            "outputs differ: model.blocks.0.attn (Attention), call 1\n"
            "  its inputs: input[0]: same values, dims permuted (1, 0, 2)\n") in text
    assert "layout  layout       model.blocks.0.norm (LayerNorm), call 1" in text
    assert "  output (against the reference's, dims permuted (1, 0, 2)): float32[2, 5, 64]: " \
        in text
    assert "parameters and buffers of the outermost module (model): all 18 bit-identical" in text


def test_explain_on_an_init_change_counts_each_weight_once_and_agrees_with_itself(
        history: Repo) -> None:
    model = history.path / "subj" / "__init__.py"
    original = model.read_text()
    assert original.count(INIT) == 1
    model.write_text(original.replace(INIT, REFACTOR))
    try:
        done = history.invoke("explain", TOWER, "--reference", "HEAD")
    finally:
        model.write_text(original)
    text = output(done)
    assert done.returncode == 0, text
    # model.blocks is also called on its own (in features), and still counted once
    assert ("parameters and buffers of the outermost module (model): 6 of 18 differ, as first "
            "called: weights initialised or loaded differently\n"
            "  model.blocks.0.attn.qkv.weight: float32[192, 64]: ") in text
    assert "  and 1 more, by module: model.blocks.1 (1)" in text
    assert "the random generators' state differs from the reference's as " in text
    assert "so the state is set aside in comparing them" in text
    assert ("first module whose inputs are bit-identical and outputs differ: "
            "model.blocks.0.attn.qkv (Linear), call 1\n  its own parameters or buffers differ"
            ) in text
    assert "between module calls" not in text and "no module call" not in text
