"""Per-node decisions of the lowering (harl.graph.rules.hints): a conv kept in NCHW or blocked
in half the lanes, and a fusion fence; each computes what the graph did, changes the tasks as
it says, survives other rewrites and a save, and is applied once."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_ffi
from conftest import random_relax_inputs, run_relax
from test_nchwc import small_cnn

from harl.frontend.onnx_model import import_model, load_onnx
from harl.graph.config import GraphConfig
from harl.graph.pipeline import lowering
from harl.graph.rules import NODE_RULES, rule_by_name, search_rules
from harl.graph.rules.hints import FENCE, node_hints, with_fences
from harl.graph.rules.nchwc import to_nchwc
from harl.target import parse_target


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    model = load_onnx(small_cnn(tmp_path_factory.mktemp("hints") / "small_cnn.onnx"))
    mod = import_model(model)[1]
    return mod, random_relax_inputs(mod), run_relax(mod, random_relax_inputs(mod))


def _fused(mod) -> list[str]:
    """The names of the functions TVM's default fusion makes of `mod`."""
    import tvm
    from tvm import relax

    passes = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FuseOps(), relax.transform.FuseTIR(),
              relax.transform.DeadCodeElimination(["main"])]
    out = tvm.transform.Sequential(passes)(mod)
    return sorted(gv.name_hint for gv, _ in out.functions_items() if gv.name_hint != "main")


def _blocked_lanes(mod) -> dict[str, int]:
    """The lanes of each blocked conv's output in `mod` (a call_tir of conv2d_nchwc or
    dwconv2d_nchwc), by its variable's name."""
    lanes = {}
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            callee = getattr(b.value, "args", [None])[0]
            if "conv2d_nchwc" in getattr(callee, "name_hint", ""):
                lanes[b.var.name] = int(b.var.ty.shape.values[4])
    return lanes


def _same_outputs(mod, cnn):
    _, inputs, want = cnn
    for got, expected in zip(run_relax(mod, inputs), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_node_rules_are_named_documented_and_offered_only_where_asked():
    names = [rule.name for rule in NODE_RULES]
    assert len(set(names)) == len(names) and all(rule.doc for rule in NODE_RULES)
    assert rule_by_name("fusion_fence") is NODE_RULES[-1]
    plain = {r.name for r in search_rules(blocked_convs=True)}
    assert not plain & set(names)
    assert set(names) <= {r.name for r in search_rules(blocked_convs=True, node_decisions=True)}
    # without the blocked layout pass the conv hints decide nothing: only the fence is offered
    gpu = {r.name for r in search_rules(blocked_convs=False, node_decisions=True)}
    assert gpu & set(names) == {"fusion_fence"}


def test_a_conv_kept_in_nchw_or_halved_is_laid_out_so_and_computes_the_same(cnn):
    mod = cnn[0]
    keep, half = rule_by_name("conv_keep_nchw"), rule_by_name("conv_half_block")
    convs = [m.vars[0] for m in keep.matches(mod)]
    assert len(convs) == 5 and [m.vars[0] for m in half.matches(mod)] == convs  # dw included
    default = _blocked_lanes(to_nchwc(mod, 16))
    stem, pointwise = convs[0], convs[1]
    assert default[f"{stem}_nchwc"] == 16 and default[f"{pointwise}_nchwc"] == 16

    kept = keep.apply(mod, keep.matches(mod)[0])
    assert node_hints(kept) == {stem: {"conv_layout": "nchw"}}
    assert keep.matches(kept)[0].vars[0] == pointwise  # one hint per conv
    assert half.matches(kept)[0].vars[0] == pointwise
    lanes = _blocked_lanes(to_nchwc(kept, 16))
    assert f"{stem}_nchwc" not in lanes and lanes[f"{pointwise}_nchwc"] == 16
    _same_outputs(to_nchwc(kept, 16), cnn)

    halved = half.apply(mod, half.matches(mod)[1])
    lanes = _blocked_lanes(to_nchwc(halved, 16))
    assert lanes[f"{pointwise}_nchwc"] == 8 and lanes[f"{stem}_nchwc"] == 16
    _same_outputs(to_nchwc(halved, 16), cnn)


def test_a_fence_computes_its_node_alone_and_the_same(cnn):
    mod = cnn[0]
    fence = rule_by_name("fusion_fence")
    found = fence.matches(mod)
    # the ops that read a conv or the classifier's matmul: the stem's bias add, the branches'
    # ReLUs, the residual add, the pool after the last conv, ...
    assert found and all(m.note for m in found)
    first = found[0]
    fenced = fence.apply(mod, first)
    assert node_hints(fenced) == {first.vars[0]: {FENCE: True}}
    assert first not in fence.matches(fenced)
    assert with_fences(mod) is mod  # nothing fenced: nothing to do
    lowered = with_fences(fenced)
    assert len(_fused(lowered)) > len(_fused(mod))  # the fenced op is a function of its own
    _same_outputs(lowered, cnn)
    assert with_fences(lowered) is lowered  # applied once

    # after the blocked layout pass, the fence lands on the op's blocked twin
    lower = lowering(parse_target('{"kind": "llvm", "mcpu": "skylake-avx512"}'), GraphConfig())
    blocked = lower(fenced)
    assert len(_fused(blocked)) > len(_fused(lower(mod)))
    _same_outputs(blocked, cnn)
    assert tvm_ffi.structural_equal(lower(blocked)["main"], blocked["main"])


def test_hints_survive_other_rewrites_and_a_save(cnn):
    import tvm

    mod = cnn[0]
    fence = rule_by_name("fusion_fence")
    fenced = fence.apply(mod, fence.matches(mod)[0])
    keep = rule_by_name("conv_keep_nchw")
    both = keep.apply(fenced, keep.matches(fenced)[-1])
    assert len(node_hints(both)) == 2
    loaded = tvm.ir.load_json(tvm.ir.save_json(both))
    assert node_hints(loaded) == node_hints(both)
    # a rewrite elsewhere (one conv to NHWC, through rewrite_vars) keeps main's hints
    nhwc = rule_by_name("conv_nhwc")
    other = next(m for m in nhwc.matches(both) if m.vars[0] not in node_hints(both))
    assert node_hints(nhwc.apply(both, other)) == node_hints(both)


def test_go_takes_node_decisions_in_a_run_that_verifies_and_plain_tvm_rebuilds(
        tmp_path, monkeypatch):
    """`--graph go` from a policy that takes every match, graphs priced cheaper by each hint
    they carry: its pass keeps convs in NCHW and fences the ops after them; the run
    tunes that graph, and plain TVM rebuilds it from the work dir, matching onnxruntime."""
    import json
    from types import SimpleNamespace

    import torch
    from conftest import assert_plain_tvm_rebuilds, harl_tune_here

    from harl.graph.rl.config import PPOConfig
    from harl.graph.rl.go_policy import make_go_policy
    from harl.graph.rl.relax_graph import EDGE_DIM, NODE_DIM
    from harl.graph.rl.saving import save_policy

    rules = [r.name for r in search_rules(blocked_convs=True, node_decisions=True)]
    config = PPOConfig(hidden=8, layers=1)
    policy = make_go_policy(node_dim=NODE_DIM, edge_dim=EDGE_DIM, rules=len(rules),
                            config=config, heads=2, segment=8)
    with torch.no_grad():  # every match taken
        policy.take_head[-1].weight.zero_()
        policy.take_head[-1].bias.fill_(10.0)
    save_policy(tmp_path / "take_all.npz", policy, config=config, node_dim=NODE_DIM,
                edge_dim=EDGE_DIM, rule_names=tuple(rules))
    toml = tmp_path / "go.toml"
    toml.write_text(f'[graph]\ncost_samples = 0\nretune_share = 0.0\n[graph.go]\n'
                    f'node_decisions = true\npolicy = "{tmp_path / "take_all.npz"}"\n'
                    f'finetune_episodes = 0\n'
                    f'passes = 1\nmax_evals = 4\n')
    model = small_cnn(tmp_path / "small_cnn.onnx")
    monkeypatch.setattr("harl.graph.cost.GraphCostModel.estimate", lambda self, mod: (
        SimpleNamespace(total_ms=1.0 - 0.01 * len(node_hints(mod)))))
    work_dir = tmp_path / "run"
    proc = harl_tune_here(model, "--graph", "go", "--trials", 4, "--work-dir", work_dir,
                          "--config", toml, "--no-evaluate")  # plain TVM's build checks it
    assert proc.returncode == 0, proc.stderr[-3000:]
    graph = json.loads((work_dir / "graph.json").read_text())
    taken = {label.split("@")[0] for label in graph["applied"]}
    assert {"conv_keep_nchw", "fusion_fence"} <= taken, graph["applied"]
    saved = (work_dir / "model_rewritten.json").read_text()
    assert '"op_pattern"' in saved
    assert_plain_tvm_rebuilds(model, work_dir)
