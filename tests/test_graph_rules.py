"""Every graph rule, on exported models where it fires: its matches, the same outputs after
applying it at each of them (compiled and run by TVM on random inputs), the structural change
it makes; and no match where it cannot apply."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import op_count, random_relax_inputs, run_relax
from torch import nn

from harl.graph.load import relax_of_onnx
from harl.graph.rule import Match
from harl.graph.rules import ALL_RULES, rule_by_name

EXAMPLES = Path(__file__).resolve().parent.parent / "tasks" / "examples"


def _light(name: str) -> Path:
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"the onnx package lacks {path.name}")
    return path


class GatedMLP(nn.Module):
    """A gated MLP: gate and up projections of one input (with biases)."""

    def __init__(self):
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(16, 24), nn.Linear(16, 24), nn.Linear(24, 16)

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class Scaled(nn.Module):
    """Constant scales after a matmul (per column, through its bias) and before one."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(16, 24), nn.Linear(24, 8, bias=False)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 24))

    def forward(self, x):
        return self.second(torch.relu(self.first(x) * self.scale) / 4.0)


class Branches(nn.Module):
    """An Inception-like module: 1x1, 1x1 and 3x3 convs of one input, with biases and ReLUs,
    and a conv scaled per channel then shifted."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 6, 1), nn.Conv2d(4, 5, 1)
        self.c = nn.Conv2d(4, 7, 3, padding=1)
        self.d = nn.Conv2d(18, 8, 3, padding=1)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8).reshape(1, 8, 1, 1))

    def forward(self, x):
        y = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x)), torch.relu(self.c(x))], 1)
        return self.d(y) * self.scale + 1.0


class Attention(nn.Module):
    """Two heads of scores: q @ k^T, the transpose written by the exporter into one
    permutation with the heads' split."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        q = self.q(x).reshape(1, 8, 2, 8).transpose(1, 2)
        k = self.k(x).reshape(1, 8, 2, 8).transpose(1, 2)
        return (q @ k.transpose(-2, -1)).softmax(-1)


class Reshapes(nn.Module):
    """Two reshapes in a row (the exporter keeps them)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.lin(x).reshape(1, 8, 4, 4).reshape(1, 4, 32))


class Sums(nn.Module):
    """Sums of matmuls: by a shared input, by a shared weight, and a matmul of a sum."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 24, bias=False), nn.Linear(16, 24, bias=False)
        self.c, self.d = nn.Linear(24, 8, bias=False), nn.Linear(24, 8, bias=False)

    def forward(self, x):
        h = self.a(x) + self.b(x)
        r = torch.relu(h)
        return self.c(h) + self.c(r) + self.d(h + r)


TORCH_MODELS = {"gated_mlp": (GatedMLP, (1, 8, 16)), "scaled": (Scaled, (1, 8, 16)),
                "branches": (Branches, (1, 4, 8, 8)), "attention": (Attention, (1, 8, 16)),
                "reshapes": (Reshapes, (1, 8, 16)), "sums": (Sums, (1, 8, 16))}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> Relax module, for the torch modules above and the example models."""
    out = {}
    root = tmp_path_factory.mktemp("graph_rules")
    for name, (cls, shape) in TORCH_MODELS.items():
        torch.manual_seed(0)
        path = root / f"{name}.onnx"
        torch.onnx.export(cls().eval(), (torch.randn(shape),), str(path), input_names=["x"],
                          opset_version=17, dynamo=False)
        out[name] = relax_of_onnx(path)
    for name in ("transformer_block", "cnn"):
        out[name] = relax_of_onnx(EXAMPLES / f"{name}.onnx")
    out["transposes"] = relax_of_onnx(_transposes(root / "transposes.onnx"))
    return out


def _transposes(path: Path) -> Path:
    """A graph with two transposes in a row, written with onnx.helper (torch's exporter fuses
    them): one pair cancels, one composes."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["b"], ["c"]),
             helper.make_node("Transpose", ["c"], ["d"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 1])]
    graph = helper.make_graph(nodes, "transposes",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path




def _check_equal(mod, rule, *, first: int = 2):
    """Apply `rule` at each of its first matches; the outputs stay the same. Returns the
    rewritten modules."""
    inputs = random_relax_inputs(mod)
    expected = run_relax(mod, inputs)
    found = rule.matches(mod)
    assert found, f"{rule.name} found no match"
    assert found == rule.matches(mod)  # deterministic
    rewritten = []
    for match in found[:first]:
        new = rule.apply(mod, match)
        for got, want in zip(run_relax(new, inputs), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert match not in rule.matches(new)
        rewritten.append(new)
    return rewritten


def test_registry_names_are_unique_and_documented():
    names = [rule.name for rule in ALL_RULES]
    assert len(set(names)) == len(names)
    assert all(rule.doc for rule in ALL_RULES)
    assert rule_by_name("merge_parallel_matmul").name == "merge_parallel_matmul"
    with pytest.raises(KeyError, match="known"):
        rule_by_name("no_such_rule")


@pytest.mark.parametrize("model, matmuls, merged", [("transformer_block", 3, 1),
                                                    ("gated_mlp", 2, 1)])
def test_merge_parallel_matmul(models, model, matmuls, merged):
    mod = models[model]
    rule = rule_by_name("merge_parallel_matmul")
    (new,) = _check_equal(mod, rule)
    assert len(rule.matches(mod)[0].vars) == matmuls
    assert op_count(new, "relax.matmul") == op_count(mod, "relax.matmul") - matmuls + merged
    assert op_count(new, "relax.split") == 1


def test_fold_scale_matmul(models):
    rule = rule_by_name("fold_scale_matmul")
    for name, count in (("scaled", 2), ("transformer_block", 1)):
        mod = models[name]
        assert len(rule.matches(mod)) == count
        for new in _check_equal(mod, rule):
            scales = op_count(new, "relax.multiply") + op_count(new, "relax.divide")
            assert scales == op_count(mod, "relax.multiply") + op_count(mod, "relax.divide") - 1


def test_hoist_scale_brings_attentions_scale_to_the_q_projection(models):
    """1/sqrt(d) on q @ k^T moves through the matmul, the heads' transpose and reshape and
    the bias add, to where it folds into the Q projection's weight."""
    mod = models["transformer_block"]
    hoist, fold = rule_by_name("hoist_scale"), rule_by_name("fold_scale_matmul")
    (first,) = hoist.matches(mod)
    assert first.note.startswith("through matmul")
    steps = [mod]
    while hoist.matches(steps[-1]):
        steps.append(hoist.apply(steps[-1], hoist.matches(steps[-1])[0]))
    assert len(steps) == 6  # matmul, transpose, reshape, bias add, the projection's matmul
    folded = fold.apply_all(steps[-1])
    inputs = random_relax_inputs(mod)
    for got, want in zip(run_relax(folded, inputs), run_relax(mod, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert op_count(folded, "relax.multiply") == op_count(mod, "relax.multiply") - 2  # and the 0.5


def test_merge_parallel_conv_enlarges_a_1x1_to_3x3(models):
    mod = models["branches"]
    rule = rule_by_name("merge_parallel_conv")
    (match,) = rule.matches(mod)
    assert len(match.vars) == 3 and "1x1+1x1+3x3 -> 3x3" in match.note
    (new,) = _check_equal(mod, rule)
    assert op_count(new, "relax.nn.conv2d") == op_count(mod, "relax.nn.conv2d") - 2
    assert op_count(new, "relax.nn.relu") == op_count(mod, "relax.nn.relu") - 2


def test_fold_scale_conv(models):
    mod = models["branches"]
    rule = rule_by_name("fold_scale_conv")
    (new,) = _check_equal(mod, rule)
    assert op_count(new, "relax.multiply") == op_count(mod, "relax.multiply") - 1


@pytest.fixture(scope="module")
def squeezenet():
    return relax_of_onnx(_light("light_squeezenet"))


def test_merge_parallel_conv_fires_on_squeezenet_fire_modules(squeezenet):
    found = rule_by_name("merge_parallel_conv").matches(squeezenet)
    assert len(found) == 8 and all("1x1+3x3 -> 3x3" in m.note for m in found)


@pytest.mark.slow  # importing Inception-v1 takes ~30 s on 2 cores
def test_merge_parallel_conv_fires_on_inception_modules():
    found = rule_by_name("merge_parallel_conv").matches(relax_of_onnx(_light("light_inception_v1")))
    assert len(found) == 9 and all(len(m.vars) == 3 for m in found)  # three 1x1s each


def test_split_concat_cancels_after_merging_squeezenet_fire_modules(squeezenet):
    mod = rule_by_name("merge_parallel_conv").apply_all(squeezenet)
    rule = rule_by_name("cancel_split_concat")
    assert len(rule.matches(mod)) == 8
    new = rule.apply_all(mod)
    assert op_count(new, "relax.split") == 0 and op_count(new, "relax.concat") == 0


@pytest.mark.parametrize("model", ["attention", "transformer_block"])
def test_fuse_transpose_matmul(models, model):
    mod = models[model]
    rule = rule_by_name("fuse_transpose_matmul")
    for new in _check_equal(mod, rule, first=1):
        assert op_count(new, "relax.matmul") == op_count(mod, "relax.matmul") - 1
        assert any(gv.name_hint.startswith("NT_matmul") for gv in new.get_global_vars())


def test_cancel_transpose_pair(models):
    mod = models["transposes"]
    rule = rule_by_name("cancel_transpose_pair")
    assert len(rule.matches(mod)) == 2
    cancelled, composed = _check_equal(mod, rule)
    assert op_count(cancelled, "relax.permute_dims") == 2
    assert op_count(composed, "relax.permute_dims") == 3


def test_cancel_reshape_pair(models):
    mod = models["reshapes"]
    (new,) = _check_equal(mod, rule_by_name("cancel_reshape_pair"))
    assert op_count(new, "relax.reshape") == op_count(mod, "relax.reshape") - 1


def test_factor_matmul_of_sum(models):
    mod = models["sums"]
    rule = rule_by_name("factor_matmul_of_sum")
    assert [m.note for m in rule.matches(mod)] == ["shared input", "shared weight"]
    for new in _check_equal(mod, rule):
        assert op_count(new, "relax.matmul") == op_count(mod, "relax.matmul") - 1


def test_expand_matmul_of_sum(models):
    mod = models["sums"]
    rule = rule_by_name("expand_matmul_of_sum")
    assert len(rule.matches(mod)) == 2  # c(a(x) + b(x)) and d(h + r)
    factor = rule_by_name("factor_matmul_of_sum")
    for match, new in zip(rule.matches(mod), _check_equal(mod, rule), strict=True):
        assert op_count(new, "relax.matmul") == op_count(mod, "relax.matmul") + 1
        assert Match(factor.name, match.vars, "shared weight") in factor.matches(new)  # back


def test_conv_nhwc_one_conv_at_a_time(models):
    mod = models["cnn"]
    rule = rule_by_name("conv_nhwc")
    for new in _check_equal(mod, rule):
        layouts = [str(b.value.attrs.data_layout) for block in new["main"].body.blocks
                   for b in block.bindings if _ops_name(b) == "relax.nn.conv2d"]
        assert sorted(layouts) == ["NCHW", "NHWC"]
        assert op_count(new, "relax.permute_dims") == op_count(mod, "relax.permute_dims") + 2


def test_convert_layout_nhwc_whole_graph(models):
    mod = models["cnn"]
    (new,) = _check_equal(mod, rule_by_name("convert_layout_nhwc"))
    layouts = {str(b.value.attrs.data_layout) for block in new["main"].body.blocks
               for b in block.bindings if _ops_name(b) == "relax.nn.conv2d"}
    assert layouts == {"NHWC"}
    names = [b.var.name for block in new["main"].body.blocks for b in block.bindings]
    assert len(names) == len(set(names))  # TVM's pass reuses names; matches need them unique


def test_convert_layout_nhwc_no_match_where_tvms_pass_fails(squeezenet):
    assert rule_by_name("conv_nhwc").matches(squeezenet)
    assert rule_by_name("convert_layout_nhwc").matches(squeezenet) == []  # its dropout's tuple


def _ops_name(binding) -> str | None:
    return getattr(getattr(binding.value, "op", None), "name", None)


@pytest.mark.parametrize("rule", [rule.name for rule in ALL_RULES])
def test_no_match_where_a_rule_cannot_apply(models, rule):
    """The example CNN has nothing for the matmul and data-movement rules; the transformer
    block has no conv."""
    model = "transformer_block" if "conv" in rule else "cnn"
    assert rule_by_name(rule).matches(models[model]) == []
