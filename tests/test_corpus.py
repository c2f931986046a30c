"""tools/make_corpus.py: the committed manifest matches the script, the split follows its rule,
and the script builds every model (small variants: export, onnx.checker, onnxruntime)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import make_corpus  # noqa: E402

SCRIPT = ROOT / "tools" / "make_corpus.py"


def test_committed_manifest_is_the_scripts():
    committed = make_corpus.MANIFEST.read_text()
    assert committed == make_corpus.manifest_text(), \
        "tasks/corpus.json is stale: python tools/make_corpus.py --write-manifest"
    assert json.loads(committed)["models"] == make_corpus.manifest()


def test_corpus_covers_the_families_with_unique_names():
    models = make_corpus.manifest()
    assert len(models) >= 20
    names = [m["name"] for m in models]
    assert len(set(names)) == len(names)
    families = Counter(m["family"] for m in models)
    assert {"transformer-encoder", "transformer-decoder", "vision-transformer", "resnet",
            "mobile-cnn", "efficientnet", "inception", "squeezenet", "mlp",
            "recurrent"} <= set(families)


def test_split_alternates_within_each_family_by_name():
    models = make_corpus.manifest()
    by_family: dict[str, list[dict]] = {}
    for m in models:
        by_family.setdefault(m["family"], []).append(m)
    for family, members in by_family.items():
        ordered = sorted(members, key=lambda m: m["name"])
        expected = [make_corpus.DEV, make_corpus.HELD_OUT] * len(ordered)
        assert [m["split"] for m in ordered] == expected[:len(ordered)], family
        if len(members) >= 2:
            assert {m["split"] for m in members} == {make_corpus.DEV, make_corpus.HELD_OUT}


def test_split_depends_on_names_and_families_only():
    specs = make_corpus.specs()
    shuffled = specs[:]
    random.Random(1).shuffle(shuffled)
    assert make_corpus.splits(shuffled) == make_corpus.splits(specs)
    # a model added to one family moves no model of another
    extra = make_corpus.Spec("aaa_extra", "mlp", "test", make_corpus.image(32))
    before, after = make_corpus.splits(specs), make_corpus.splits([*specs, extra])
    moved = {n for n in before if before[n] != after[n]}
    assert {m.family for m in specs if m.name in moved} <= {"mlp"}


def test_light_models_are_labelled_as_constant_weights():
    for m in make_corpus.manifest():
        constant = m["name"].startswith("light_")
        assert ("constant fills" in m["weights"]) == constant, m["name"]
        assert ("onnx/backend/test/data/light" in m["source"]) == constant, m["name"]


def test_list_and_unknown_names(capsys):
    assert make_corpus.main(["--list", "--split", "held-out"]) == 0
    held_out = {m["name"] for m in make_corpus.manifest() if m["split"] == make_corpus.HELD_OUT}
    rows = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows == held_out
    with pytest.raises(SystemExit) as exit_:
        make_corpus.main(["--only", "no_such_model"])
    assert exit_.value.code == 2
    assert "no corpus model no_such_model" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    run = subprocess.run([sys.executable, SCRIPT, "--small", "--out", out],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return out, run.stdout


def test_script_builds_and_checks_every_model(small_corpus):
    out, stdout = small_corpus
    names = [m["name"] for m in make_corpus.manifest()]
    assert sorted(p.stem for p in out.glob("*.onnx")) == sorted(names)
    for name in names:  # each checked: the script prints onnxruntime's latency after the check
        assert f"{name}.onnx  (onnxruntime " in stdout, name


@pytest.mark.parametrize("name", ["torch_decoder", "lstm_lm"])
def test_harl_imports_built_models_and_tvm_matches_onnxruntime(small_corpus, name):
    out, _ = small_corpus
    spec = next(s for s in make_corpus.specs() if s.name == name)
    assert make_corpus.count_tasks(out / f"{name}.onnx") > 0
    assert make_corpus.compare_untuned(spec, out / f"{name}.onnx", small=True) < 1e-3
