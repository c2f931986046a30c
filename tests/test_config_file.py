"""Config files (harl.config_file): every field reachable from TOML, checked, printed, recorded,
and compared on resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import harl_tune, harl_tune_here

from harl.config import RpcConfig, TuneConfig
from harl.config_file import (
    ConfigError,
    effective_config,
    field_docs,
    field_types,
    to_toml,
    tomllib,
)

MODEL = Path("m.onnx")


def _configs(config, path=""):
    """(dotted path, config) of `config` and every config dataclass it holds."""
    yield path, config
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            yield from _configs(value, f"{path}.{f.name}" if path else f.name)


def _read_back(text: str, tmp_path: Path) -> TuneConfig:
    (tmp_path / "printed.toml").write_text(text)
    return effective_config(MODEL, tmp_path / "printed.toml")


def test_print_config_without_a_model_round_trips_to_the_defaults(tmp_path):
    proc = harl_tune_here("--print-config")
    assert proc.returncode == 0, proc.stderr
    tomllib.loads(proc.stdout)  # valid TOML
    assert _read_back(proc.stdout, tmp_path) == TuneConfig(model=MODEL)


def test_every_field_is_printed_under_its_help():
    config = TuneConfig(model=MODEL)
    sections: dict[str, list[str]] = {"": []}  # table -> its lines
    table = ""
    for line in to_toml(config).splitlines():
        if line.startswith("["):
            table = line.strip("[]")
            sections[table] = []
        else:
            sections[table].append(line)
    for path, part in _configs(config):
        lines, docs = sections[path], field_docs(type(part))
        for f in dataclasses.fields(part):
            if f.name in ("model", "fresh", "config_changed_ok", "rpc") or \
                    dataclasses.is_dataclass(getattr(part, f.name)):
                continue
            assert docs.get(f.name), f"{path}.{f.name} has no help"
            (at,) = [i for i, text in enumerate(lines)
                     if text.startswith((f"{f.name} = ", f"# {f.name} = "))]
            assert lines[at - 1].startswith("# ") and docs[f.name].split()[-1] in lines[at - 1]


def test_a_config_changed_everywhere_round_trips(tmp_path):
    """Every scalar field of every table set away from its default, printed and read back."""
    def changed(part):
        values = {}
        for f in dataclasses.fields(part):
            value, kind = getattr(part, f.name), field_types(type(part))[f.name]
            if dataclasses.is_dataclass(value):
                values[f.name] = changed(value)
            elif isinstance(value, bool):
                values[f.name] = not value
            elif isinstance(value, int):
                values[f.name] = value + 1
            elif isinstance(value, float):
                values[f.name] = value * 0.5 if value else 0.25
            elif isinstance(value, tuple):
                values[f.name] = tuple(v * 0.5 for v in value)
            elif kind == int | None:
                values[f.name] = 3
        return dataclasses.replace(part, **values)

    config = dataclasses.replace(
        changed(TuneConfig(model=MODEL)), model=MODEL, fresh=False, config_changed_ok=False,
        target='{"kind": "llvm", "num-cores": 2}', work_dir=Path("somewhere/run"),
        strategy="metaschedule", input_shapes={"x": (1, 16), "odd name:0": (2, 3)},
        rpc=RpcConfig(tracker_host="127.0.0.1", tracker_port=9190, key="board"))
    assert config.search.tile.policy.hidden == 65 and config.measure.builder_workers == 3
    assert _read_back(to_toml(config), tmp_path) == config


def test_flags_win_over_the_file_and_the_file_over_the_defaults(tmp_path):
    (tmp_path / "c.toml").write_text(
        'seed = 3\ncost_prior = false\ntrials = 10\n[measure]\nbuild_timeout_s = 5\n'
        '[search.tile]\nepsilon = 0.3\n')
    proc = harl_tune_here("--config", tmp_path / "c.toml", "--seed", 9, "--run-timeout", 7,
                          "--print-config")
    assert proc.returncode == 0, proc.stderr
    config = _read_back(proc.stdout, tmp_path)
    assert (config.seed, config.cost_prior, config.trials) == (9, False, 10)
    assert (config.measure.build_timeout_s, config.measure.run_timeout_s) == (5.0, 7.0)
    assert config.search.tile.epsilon == 0.3
    assert config.search.tile.policy == TuneConfig(model=MODEL).search.tile.policy


@pytest.mark.parametrize("text, words", [
    ("[allocatr]\nforward_weight = 1.0\n", ["unknown table [allocatr]", "allocator"]),
    ("[search.tile]\nepsilonn = 0.2\n", ["unknown key search.tile.epsilonn", "epsilon"]),
    ("[measure]\nreference_timing = 1\n", ["measure.reference_timing", "true or false"]),
    ('[search.tile.policy]\nlearning_rate = "fast"\n',
     ["search.tile.policy.learning_rate", "must be a number", '"fast"']),
    ("[allocator]\nreward_decay = true\n", ["allocator.reward_decay", "must be a number"]),
    ("[search.sketch]\nmin_trials = 2.5\n", ["search.sketch.min_trials", "an integer"]),
    ('model = "other.onnx"\n', ["model cannot be set in a config file"]),
    ("seed = \n", ["not valid TOML"]),
    ("[input_shapes]\nx = [1, 2.5]\n", ["input_shapes.x[1] must be an integer, not 2.5"]),
])
def test_a_bad_config_is_one_line_and_exit_2(tmp_path, tiny_matmul, text, words):
    (tmp_path / "c.toml").write_text(text)
    proc = harl_tune_here(tiny_matmul, "--config", tmp_path / "c.toml",
                          "--work-dir", tmp_path / "run")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("harl: error: config file ") and str(tmp_path / "c.toml") in line
    for word in words:
        assert word in line
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_a_fresh_process_rejects_a_bad_config_in_one_line(tmp_path):
    (tmp_path / "c.toml").write_text("[verify]\nrtol = [1]\n")
    bad = harl_tune("model.onnx", "--config", tmp_path / "c.toml", timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert "verify.rtol must be a number, not [1] (a list)" in line


def test_the_configs_reach_the_objects_harl_builds(tmp_path):
    from harl.frontend.tasks import TuningTask
    from harl.search import make_plan
    from harl.tvm_adapter import python_instance

    (tmp_path / "c.toml").write_text(
        "[search]\nrefine_pool = 16\n[search.sketch]\ntemperature = 0.5\n"
        "[search.tile]\nepsilon = 0.3\n[search.tile.policy]\nhidden = 16\n"
        "[search.tile.surrogate]\nkeep = 2\n[allocator]\nforward_weight = 0.25\n"
        "[nests]\nbelow_s = 0.0\n"
        "[cost_model]\nwarmup_samples = 3\nequal_weight_samples = 12\nmin_task_samples = 2\n")
    config = effective_config(MODEL, tmp_path / "c.toml")
    task = TuningTask("t", mod=None, weight=1.0, flop=1e6)
    plan = make_plan("harl", seed=0, num_cores=1, tasks=[task], search=config.search,
                     allocator=config.allocator, nests=config.nests, cost_model=config.cost_model)
    strategy = plan.make_search_strategy(0)
    assert strategy.config.refine_pool == 16 and strategy.config.sketch.temperature == 0.5
    assert strategy.config.tile.epsilon == 0.3 and strategy.config.tile.surrogate.keep == 2
    assert strategy.policy.config.hidden == 16
    assert strategy.policy.net.actor[0].out_features == 16
    assert plan.allocator.config.forward_weight == 0.25
    assert plan.naive_nests.below_s == 0.0
    assert python_instance(plan.cost_model).num_warmup_samples == 3
    assert (strategy.scorer.equal_weight_samples, strategy.scorer.min_task_samples) == (12, 2)


def test_a_run_records_its_config_and_a_resume_with_another_is_refused(tiny_matmul, tmp_path):
    work_dir = tmp_path / "run"
    # No unscheduled nest measured (by default the tiny task's is, before tuning): the file's
    # [nests] reaches the loop.
    (tmp_path / "c.toml").write_text(
        "[search.tile]\nepsilon = 0.3\n[nests]\nfirst_max_flop = 0.0\nbelow_s = 0.0\n")
    common = (tiny_matmul, "--trials", 2, "--work-dir", work_dir, "--no-evaluate")
    proc = harl_tune_here(*common, "--config", tmp_path / "c.toml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unscheduled loop nest" not in proc.stdout
    manifest = json.loads((work_dir / "run.json").read_text())
    report = json.loads((work_dir / "report.json").read_text())
    for recorded in (manifest["config"], report["config"]):
        assert recorded["search"]["tile"]["epsilon"] == 0.3
        assert recorded["nests"] == {"measure": True, "first_max_flop": 0.0, "below_s": 0.0}
        assert recorded["trials"] == 2 and recorded["evaluate"] is False
    assert not any(task["naive"] for task in report["tasks"])

    changed = harl_tune_here(*common, "--config", tmp_path / "c.toml", "--seed", 1)
    assert changed.returncode == 2
    (line,) = changed.stderr.strip().splitlines()
    assert "another config (seed 0 -> 1)" in line and "--config-changed-ok" in line
    without_file = harl_tune_here(*common)
    assert without_file.returncode == 2
    assert "(nests.below_s 0.0 -> 0.0001; nests.first_max_flop" in without_file.stderr

    # What does not shape the search may change (here: the budget, spent, and the output); a
    # change goes through when told.
    same = harl_tune_here(tiny_matmul, "--trials", 1, *common[3:], "--config", tmp_path / "c.toml",
                          "--quiet")
    assert same.returncode == 0 and not same.stdout, same.stderr[-3000:]
    told = harl_tune_here(*common, "--config", tmp_path / "c.toml", "--seed", 1,
                          "--config-changed-ok")
    assert told.returncode == 0, told.stderr[-3000:]
    assert json.loads((work_dir / "run.json").read_text())["config"]["seed"] == 1


def test_an_invalid_merged_value_is_a_config_error():
    with pytest.raises(ConfigError, match=r"\[search\]: transplant_share must be within"):
        effective_config(MODEL, flags={"search": {"transplant_share": 2.0}})
