"""The knowledge store (harl.store): keys, safe entries, the trained cost model and a run that
learns from another's measurements."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
import tvm
from conftest import EXAMPLES, harl_tune_here, three_convs

from harl.store import prior_training
from harl.store.in_run import choose_prior
from harl.store.rows import MeasuredWorkload, from_arrays, to_arrays
from harl.store.store import KnowledgeStore
from harl.target import parse_target

CPU_A = '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}'
CPU_B = '{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}'


def synthetic_workloads(source: str, seed: int, count: int = 3, records: int = 24,
                        width: int = 164) -> list[MeasuredWorkload]:
    """Workloads whose throughput is a fixed sum over a program's stores of two of their
    features (as MetaSchedule's XGBModel scores a program), one record failed per workload."""
    rng = np.random.default_rng(seed)
    workloads = []
    for index in range(count):
        features = [rng.random((int(rng.integers(2, 6)), width)).astype("float32")
                    for _ in range(records)]
        latencies = [float(1.0 / (x[:, 0] + 0.5 * x[:, 1]).sum()) for x in features]
        latencies[0] = float("inf")
        workloads.append(MeasuredWorkload(f"{source}-w{index}", source, features, latencies,
                                          flop=1e7))
    return workloads


def test_rows_round_trip_and_disagreeing_arrays_are_refused():
    workloads = synthetic_workloads("m", seed=0)
    arrays, described = to_arrays(workloads)
    back = from_arrays(arrays, json.loads(json.dumps(described)), source="m")
    assert [w.name for w in back] == [w.name for w in workloads]
    for a, b in zip(workloads, back, strict=True):
        assert a.latencies == b.latencies and a.flop == b.flop
        assert all(np.array_equal(x, y) for x, y in zip(a.features, b.features, strict=True))
    arrays["stores"] = arrays["stores"][:-1]
    with pytest.raises(ValueError, match="do not agree"):
        from_arrays(arrays, described, source="m")


def test_keys_keep_other_targets_and_tvm_versions_apart(tmp_path, monkeypatch):
    store = KnowledgeStore(tmp_path, parse_target(CPU_A))
    assert store.add_workloads(synthetic_workloads("m", seed=0), model_id="m",
                               model_name="m") == 72
    assert [e["model"] for e in KnowledgeStore(tmp_path, parse_target(CPU_A)).entries()] == ["m"]
    other_cpu = KnowledgeStore(tmp_path, parse_target(CPU_B))
    assert other_cpu.folder != store.folder and other_cpu.entries() == []
    monkeypatch.setattr(tvm, "__version__", "0.99.0")
    other_tvm = KnowledgeStore(tmp_path, parse_target(CPU_A))
    assert other_tvm.folder != store.folder and other_tvm.entries() == []


def test_a_model_trained_on_the_store_ranks_held_out_models_and_is_kept(tmp_path, monkeypatch):
    store = KnowledgeStore(tmp_path, parse_target(CPU_A), min_records=100, folds=3)
    store.add_workloads(synthetic_workloads("a", seed=1), model_id="a", model_name="a")
    assert store.prior(shipped=None) is None  # 72 records: fewer than min_records
    for name, seed in (("b", 2), ("c", 3)):
        store.add_workloads(synthetic_workloads(name, seed=seed), model_id=name, model_name=name)
    trained = store.prior(shipped=None)
    assert trained.models == 3 and trained.records == 216
    assert trained.held_out_rho > 0.5 and trained.better
    assert choose_prior(store, None, "better")[1] == "store"
    assert choose_prior(store, None, "never") == (None, None)

    def no_training(*args, **kwargs):
        raise AssertionError("the kept model was trained again")

    monkeypatch.setattr(prior_training, "train", no_training)
    again = KnowledgeStore(tmp_path, parse_target(CPU_A), min_records=100).prior(shipped=None)
    assert again.held_out_rho == trained.held_out_rho and again.records == 216
    features = synthetic_workloads("d", seed=4)[0].features
    assert np.allclose(prior_training.xgb_predict(again.prior.xgb, features),
                       prior_training.xgb_predict(trained.prior.xgb, features))


def test_a_damaged_or_foreign_store_is_skipped_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="harl")
    store = KnowledgeStore(tmp_path, parse_target(CPU_A), min_records=10)
    for name, seed in (("a", 1), ("b", 2)):
        store.add_workloads(synthetic_workloads(name, seed=seed), model_id=name, model_name=name)
    (store.runs / "a.npz").write_bytes(b"not an npz")
    (store.runs / "c.json").write_text("{not json")
    trained = store.prior(shipped=None)
    assert trained.models == 1  # b only
    warnings = " | ".join(r.getMessage() for r in caplog.records)
    assert "a.npz unreadable" in warnings and "c.json unreadable" in warnings
    (store.folder / "key.json").write_text(json.dumps({"target": "cuda"}))
    caplog.clear()
    assert store.prior(shipped=None) is None
    assert store.add_workloads(synthetic_workloads("d", seed=3), model_id="d",
                               model_name="d") is None
    assert "names another target" in caplog.records[0].getMessage()


def test_the_tile_policy_is_kept_for_the_next_run_and_a_damaged_one_is_not_used(tmp_path,
                                                                                  caplog):
    caplog.set_level(logging.WARNING, logger="harl")
    store = KnowledgeStore(tmp_path, parse_target(CPU_A))
    assert store.policy() is None
    assert store.add_policy({"actor.weight": np.ones((2, 3), dtype="float32")})
    assert np.array_equal(store.policy()["actor.weight"], np.ones((2, 3)))
    assert KnowledgeStore(tmp_path, parse_target(CPU_B)).policy() is None
    (store.folder / "tile_policy.npz").write_bytes(b"\x00garbage")
    assert store.policy() is None and "unreadable" in caplog.records[-1].getMessage()


def test_schedules_are_kept_per_model_and_read_back_fastest_per_loops(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="harl")
    store = KnowledgeStore(tmp_path, parse_target(CPU_A))
    assert store.schedules() == []
    sites, state = [["tile", 2, 0]], [[8, 8]]
    assert store.add_schedules([{"latency_s": 2e-3, "sites": sites, "state": state}],
                               model_id="a")
    assert store.add_schedules([{"latency_s": 1e-3, "sites": sites, "state": [[4, 16]]},
                                {"latency_s": 5e-3, "sites": sites, "state": [[1, 32]]}],
                               model_id="b")
    assert [(o.latency_s, o.state) for o in store.schedules()] == [
        (1e-3, ((4, 16),)), (5e-3, ((1, 32),))]  # one per loop extent (64 and 32)
    (store.folder / "schedules" / "b.json").write_text("{cut sh")
    assert [o.latency_s for o in store.schedules()] == [2e-3]
    assert "unreadable" in caplog.records[-1].getMessage()
    assert KnowledgeStore(tmp_path, parse_target(CPU_B)).schedules() == []


def test_an_unwritable_store_warns_and_the_run_goes_on(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="harl")
    (tmp_path / "file").write_text("a file where the store's folder should be")
    store = KnowledgeStore(tmp_path / "file", parse_target(CPU_A))
    assert store.add_workloads(synthetic_workloads("a", seed=1), model_id="a",
                               model_name="a") is None
    assert "unwritable" in caplog.records[-1].getMessage()
    assert not store.add_policy({"w": np.zeros(2)})
    assert store.prior(shipped=None) is None


def test_a_run_learns_from_the_measurements_another_model_left_in_the_store(tmp_path):
    """Two real runs (llvm): the first keeps its records; the second, of another model, ranks
    its samples with a cost model trained on them."""
    store = tmp_path / "store"
    config = tmp_path / "store.toml"
    config.write_text('[store]\nuse = "always"\nmin_records = 4\nfolds = 2\n'
                      'tile_policy = true\n[search.tile]\nmethod = "ppo"\n')
    first = harl_tune_here(three_convs(tmp_path / "convs.onnx"), "--trials", "6",
                           "--work-dir", tmp_path / "first", "--store", store, "--no-evaluate",
                           "--config", config)
    assert first.returncode == 0, first.stderr
    assert "measured records kept in" in first.stdout
    [entry] = (p for p in store.glob("*/runs/*.json"))
    assert json.loads(entry.read_text())["records"] >= 4
    second = harl_tune_here(EXAMPLES / "cnn.onnx", "--trials", "4", "--work-dir",
                            tmp_path / "second", "--store", store, "--no-evaluate",
                            "--config", config)
    assert second.returncode == 0, second.stderr
    assert "a cost model trained on 1 models tuned here before" in second.stdout
    assert "the tile policy starts from the one a run left in" in second.stdout
    kept = re.search(r"(\d+) schedules earlier runs found", second.stdout)  # the first's
    assert kept and int(kept.group(1)) >= 1
    assert len(list(store.glob("*/schedules/*.json"))) == 2  # one file per model
    report = json.loads((tmp_path / "second" / "report.json").read_text())
    assert report["cost_prior_source"] == "store"
    assert len(list(store.glob("*/runs/*.json"))) == 2
