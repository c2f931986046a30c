"""tools/bench.py: pure curve and ratio arithmetic, and the --smoke pipeline end to end."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT, harl_tune

sys.path.insert(0, str(ROOT / "tools"))

from benchlib.arms import (  # noqa: E402
    ABLATION_ARMS,
    ARMS,
    arm_named,
    arm_toml,
    choose_baseline,
    parse_arms,
    write_arm_config,
)
from benchlib.curves import (  # noqa: E402
    CurvePoint,
    band,
    estimate_curve,
    first_reaching,
    spread,
    trial_cost,
)
from benchlib.openvino_runner import OPENVINO, openvino_installed  # noqa: E402
from benchlib.report import (  # noqa: E402
    agent_split,
    paired_rows,
    reach_baseline,
    reach_reference,
    summary_columns,
    summary_rows,
    vs_baseline,
    write_runs_csv,
    write_summary,
)
from benchlib.runs import RunResult, RunSpec, tune_command  # noqa: E402
from benchlib.timing import ONNXRUNTIME, UNTUNED  # noqa: E402
from kernel_times import kernel_rows  # noqa: E402

from harl.config_file import toml_value  # noqa: E402
from harl.errors import HarlError  # noqa: E402


def row(time_s, task, latency, **batch):
    return {"time_s": str(time_s), "task_id": str(task),
            "latency_ms": "" if latency is None else str(latency), **batch}


def test_agent_split_is_per_trial_measured_in_this_run():
    spec = RunSpec(Path("m.onnx"), "m", "harl", 64, 0)
    report = {"trials_done": 30, "trials_resumed": 10, "agent_seconds": {
        "alloc/agent_seconds": 1.0, "search/agent_seconds": 9.0,
        "cost_model/update_seconds": 2.0}}
    assert agent_split(RunResult(spec, Path("."), 0, report=report)) == (0.5, 0.1)
    baseline = RunResult(RunSpec(Path("m.onnx"), "m", "metaschedule", 64, 0), Path("."), 0,
                         report={"trials_done": 30, "agent_seconds": {}})
    assert agent_split(baseline) is None  # MetaSchedule's search has no such split


def test_estimate_starts_once_every_task_is_measured_and_keeps_the_best():
    rows = [row(1, 0, 2.0), row(2, 0, None), row(3, 1, 5.0), row(4, 0, 1.0), row(5, 1, 9.0)]
    curve = estimate_curve(rows, weights=[2.0, 1.0])
    assert [(p.trials, p.seconds) for p in curve] == [(3, 3.0), (4, 4.0), (5, 5.0)]
    assert [p.estimate_ms for p in curve] == [9.0, 7.0, 7.0]
    assert estimate_curve([row(1, 0, 1.0)], weights=[1.0, 1.0]) == []


def test_unscheduled_nests_count_towards_the_best_but_not_as_trials():
    nest = {**row(0.5, 1, 0.5), "trial": ""}  # measured before tuning
    rows = [nest, {**row(1, 0, 2.0), "trial": "1"}, {**row(2, 0, 1.0), "trial": "2"}]
    curve = estimate_curve(rows, weights=[1.0, 1.0])
    assert [(p.trials, p.estimate_ms) for p in curve] == [(1, 2.5), (2, 1.5)]
    costed = [{**nest, "batch_wall_s": "", "build_s": ""},
              {**row(1, 0, 2.0, batch_wall_s="4", build_s="2", run_s="1"), "trial": "1"}]
    assert trial_cost(costed).wall_s == 4.0  # per trial: the nest is not one


def test_first_point_reaching_a_target():
    curve = [CurvePoint(3, 1.5, 9.0), CurvePoint(4, 2.0, 7.0), CurvePoint(9, 6.0, 4.0)]
    assert first_reaching(curve, 7.0) == curve[1]
    assert first_reaching(curve, 5.0) == curve[2]
    assert first_reaching(curve, 3.9) is None


def test_spread_ignores_missing_values():
    s = spread([3.0, None, 1.0, 2.0, math.inf])
    assert (s.median, s.low, s.high, s.n) == (2.0, 1.0, 3.0, 3)
    assert spread([None]) is None


def test_band_is_nan_before_any_seed_starts_and_steps_after():
    a = [CurvePoint(2, 1.0, 10.0), CurvePoint(4, 2.0, 6.0)]
    b = [CurvePoint(3, 1.0, 8.0)]
    median, low, high = band([a, b], [1, 2, 3, 4], "trials")
    assert math.isnan(median[0])
    assert median[1:] == [10.0, 9.0, 7.0] and low[1:] == [10.0, 8.0, 6.0]
    assert high[1:] == [10.0, 10.0, 8.0]


def test_trial_cost_sums_batch_columns_over_trials():
    rows = [row(1, 0, 1.0, batch_wall_s="6", build_s="2", run_s="1"), row(1, 0, 1.0),
            row(2, 0, 1.0, batch_wall_s="2", build_s="1", run_s="1"), row(2, 0, 1.0)]
    cost = trial_cost(rows)
    assert (cost.wall_s, cost.build_s, cost.run_s, cost.search_s) == (2.0, 0.75, 0.5, 0.75)
    assert trial_cost([row(1, 0, 1.0)]) is None  # histories from before the batch columns


def fake_run(strategy, seed, latency_ms, curve):
    spec = RunSpec(Path("m.onnx"), "m", strategy, 10, seed)
    return RunResult(spec, Path(f"/x/{strategy}-{seed}"), 0, report={"tune_seconds": 5.0},
                     curve=curve, latency_ms=latency_ms)


def test_ratios_and_reach_pair_runs_with_metaschedule_of_the_same_seed():
    ms0 = fake_run("metaschedule", 0, 2.0, [CurvePoint(5, 50.0, 4.0), CurvePoint(10, 99.0, 3.0)])
    ms1 = fake_run("metaschedule", 1, 4.0, [CurvePoint(10, 80.0, 2.0)])
    harl0 = fake_run("harl", 0, 1.0, [CurvePoint(4, 10.0, 3.5), CurvePoint(6, 20.0, 2.9)])
    harl1 = fake_run("harl", 1, 6.0, [CurvePoint(10, 30.0, 2.5)])
    runs = [ms0, ms1, harl0, harl1]
    assert vs_baseline(harl0, runs) == 0.5 and vs_baseline(harl1, runs) == 1.5
    reach = reach_baseline([harl0, harl1], runs)
    assert (reach.reached, reach.seeds) == (1, 2)  # seed 1 never gets to 2.0
    assert reach.trials.median == 6 and reach.seconds.median == 20.0
    refs = {"m": {ONNXRUNTIME: 2.0, UNTUNED: 10.0}}
    ms_row, harl_row = summary_rows(runs, refs)
    assert ms_row[2] == "metaschedule" and ms_row[3] == "1.00x"
    assert ms_row[4] == "10 (2/2)" and ms_row[5] == "89.5 [80, 99] (2/2)"
    assert harl_row[2] == "harl" and harl_row[3] == "1.00x [0.50, 1.50]"
    assert harl_row[4] == "6 (1/2)" and harl_row[6] == "1.75x [0.50, 3.00]"


def test_trials_to_onnxruntime_scale_each_estimate_to_its_timed_build():
    # timed 1.5x its final estimate of 2.0: the estimate must fall to 3.0 / 1.5 = 2.0
    reaches = fake_run("harl", 0, 3.0, [CurvePoint(4, 10.0, 4.0), CurvePoint(8, 20.0, 2.0)])
    never = fake_run("harl", 1, 4.0, [CurvePoint(4, 10.0, 3.0), CurvePoint(8, 20.0, 2.0)])
    untimed = fake_run("harl", 2, None, [CurvePoint(8, 20.0, 1.0)])
    reach = reach_reference([reaches, never, untimed], 3.0)
    assert (reach.reached, reach.seeds, reach.trials.median) == (1, 2, 8)
    assert reach_reference([reaches], None).seeds == 0
    refs = {"m": {ONNXRUNTIME: 3.0, UNTUNED: 10.0}}
    at = summary_columns().index("trials to onnxruntime")
    assert summary_rows([reaches, never], refs, "harl")[0][at] == "8 (1/2)"


def test_openvino_ratio_follows_onnxruntimes_only_where_openvino_was_timed(tmp_path):
    runs = [fake_run("metaschedule", 0, 2.0, [CurvePoint(10, 50.0, 2.0)]),
            fake_run("harl", 0, 1.0, [CurvePoint(10, 50.0, 2.0)])]
    without = {"m": {ONNXRUNTIME: 2.0, UNTUNED: 10.0}}
    assert "tuned / openvino" not in summary_columns()
    assert len(summary_rows(runs, without)[0]) == len(summary_columns())
    refs = {"m": {ONNXRUNTIME: 2.0, OPENVINO: 4.0, UNTUNED: 10.0}}
    columns = summary_columns(openvino=True)
    at = columns.index("tuned / openvino")
    assert columns[at - 1] == "tuned / onnxruntime"
    ms_row, harl_row = summary_rows(runs, refs)
    assert len(harl_row) == len(columns)
    assert (harl_row[at - 1], harl_row[at]) == ("0.50x", "0.25x")
    text = write_summary(tmp_path / "summary.md", ["header"], runs, refs, [])
    assert "| tuned / onnxruntime | tuned / openvino |" in text
    assert "- m: same-process medians onnxruntime 2 ms, openvino 4 ms, untuned TVM 10 ms" in text
    write_runs_csv(tmp_path / "runs.csv", runs, refs)
    rows = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert [r["vs_openvino"] for r in rows] == ["0.5", "0.25"]
    write_runs_csv(tmp_path / "runs.csv", runs, without)
    assert [r["vs_openvino"] for r in csv.DictReader((tmp_path / "runs.csv").open())] == ["", ""]


def test_a_run_tuned_beside_other_load_is_named_in_the_summary(tmp_path):
    quiet = fake_run("metaschedule", 0, 2.0, [CurvePoint(10, 50.0, 2.0)])
    crowded = fake_run("harl", 0, 1.0, [CurvePoint(10, 50.0, 2.0)])
    quiet.report["measure_other_cores"] = 0.01
    crowded.report["measure_other_cores"] = 0.93
    runs, refs = [quiet, crowded], {"m": {ONNXRUNTIME: 2.0, UNTUNED: 10.0}}
    text = write_summary(tmp_path / "summary.md", ["header"], runs, refs, [])
    named = [line for line in text.splitlines() if "cores busy on average" in line]
    assert named == ["- run m/harl-0 measured its candidates while other processes or the host "
                     "kept 0.93 cores busy on average: its tuning may have chosen on timings "
                     "that were off"]
    write_runs_csv(tmp_path / "runs.csv", runs, refs)
    rows = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert [r["measure_other_cores"] for r in rows] == ["0.01", "0.93"]


def at_path(tree, dotted: str):
    """The value at a dotted path of nested dicts or of nested config dataclasses."""
    for part in dotted.split("."):
        tree = tree[part] if isinstance(tree, dict) else getattr(tree, part)
    return tree


def test_each_arms_config_file_reads_back_as_nested_tables(tmp_path):
    assert set(ABLATION_ARMS) == set(ARMS) - {"harl", "metaschedule", "tile-prior-only"}
    assert all(ARMS[name].strategy == "harl" and ARMS[name].settings for name in ABLATION_ARMS)
    for arm in ARMS.values():
        path = write_arm_config(arm, tmp_path / f"{arm.name}.toml")
        if not arm.settings:
            assert path is None and not (tmp_path / f"{arm.name}.toml").exists()
            continue
        tables = tomllib.loads(path.read_text())
        assert {key: at_path(tables, key) for key in arm.settings} == arm.settings
    tables = tomllib.loads(arm_toml(arm_named("tile-evolutionary")))
    assert tables == {"search": {"tile": {"method": "evolutionary"}}}
    assert tomllib.loads(arm_toml(arm_named("no-prior"))) == {"cost_prior": False}


def test_config_values_are_written_as_toml_reads_them():
    for value in ("round-robin", 'a "quoted" \\ path\n\ttab\x01\x7f é 🙂', "", True, False, 0,
                  -3, 0.0, 0.25, 1e-5, 1.5e20, float("inf"), float("-inf")):
        read = tomllib.loads(f"key = {toml_value(value)}")["key"]
        assert read == value and type(read) is type(value)
    assert math.isnan(tomllib.loads(f"key = {toml_value(float('nan'))}")["key"])


def test_ablation_arms_load_through_harls_own_config_reader(tmp_path):
    """Each arm's values reach harl's config, and each ablation arm changes a default (an arm
    that spells a default out, kept for older commands, is not one)."""
    from harl.config_file import effective_config

    defaults = effective_config(Path("m.onnx"), None)
    for name in ARMS:
        arm = arm_named(name)
        path = write_arm_config(arm, tmp_path / f"{name}.toml")
        if path is None:
            continue
        config = effective_config(Path("m.onnx"), path)
        for key, value in arm.settings.items():
            assert at_path(config, key) == value, (name, key)
        changes = any(at_path(defaults, key) != value for key, value in arm.settings.items())
        assert changes is (name in ABLATION_ARMS), name


def test_arms_parse_expand_and_pick_their_baseline():
    assert [arm.name for arm in parse_arms(" no-prior, ablation,harl ")] == [
        "no-prior", "harl", *(name for name in ABLATION_ARMS if name != "no-prior")]
    assert choose_baseline(["harl", "metaschedule"]) == "metaschedule"
    assert choose_baseline(["harl", "no-nests"]) == "harl"
    assert choose_baseline(["harl", "no-nests"], "no-nests") == "no-nests"
    with pytest.raises(HarlError, match="baseline arm 'harl' is not among"):
        choose_baseline(["no-nests", "no-prior"])
    with pytest.raises(HarlError) as error:
        parse_arms("harl,no-such-arm")
    message = str(error.value)
    assert "\n" not in message and message.startswith("unknown arm 'no-such-arm'; known arms: ")
    assert "no-prior" in message and "tile-evolutionary" in message


def test_an_arms_run_is_named_after_it_and_tuned_with_its_config(tmp_path):
    spec = RunSpec(Path("m.onnx"), "m", "sketch-uniform", 32, 2)
    assert spec.strategy == "harl" and spec.work_dir(tmp_path) == tmp_path / "m" / (
        "sketch-uniform-t32-s2")
    command = tune_command(spec, tmp_path, None, None, config=tmp_path / "arm.toml")
    assert command[command.index("--strategy") + 1] == "harl"
    assert command[command.index("--config") + 1] == str(tmp_path / "arm.toml")
    plain = tune_command(RunSpec(Path("m.onnx"), "m", "metaschedule", 32, 2), tmp_path, None, None)
    assert "--config" not in plain and plain[plain.index("--strategy") + 1] == "metaschedule"
    assert "--no-store" in plain  # a bench run learns from no earlier run
    stored = tune_command(spec, tmp_path, None, None, store=tmp_path / "s")
    assert "--no-store" not in stored and stored[stored.index("--store") + 1] == str(
        tmp_path / "s")


def test_store_transfer_counts_the_trials_a_warm_run_needs_to_reach_the_cold_final(tmp_path):
    from store_transfer import compare, summary

    def run(arm_dir: str, seed: int, curve: list[CurvePoint], source: str) -> RunResult:
        spec = RunSpec(Path("m.onnx"), "m", "harl", 16, seed)
        result = RunResult(spec, tmp_path / arm_dir / "m" / f"harl-t16-s{seed}", 0,
                           report={"cost_prior_source": source, "trials_done": 16})
        result.curve = curve
        return result

    cold = run("cold", 0, [CurvePoint(4, 1.0, 9.0), CurvePoint(12, 3.0, 5.0)], "shipped")
    warm = run("warm", 0, [CurvePoint(2, 0.5, 6.0), CurvePoint(3, 0.7, 4.8)], "store")
    store = tmp_path / "store" / "k"
    store.mkdir(parents=True)
    (store / "prior.json").write_text('{"held_out_rho": 0.61, "shipped_rho": 0.4}')
    row = compare(cold, warm, 16, tmp_path / "store")
    assert (row["warm_trials"], row["cold_trials"], row["share"]) == (3, 12, 3 / 16)
    never = compare(cold, run("warm", 1, [CurvePoint(16, 4.0, 5.5)], "shipped"), 16,
                    tmp_path / "none")
    assert never["warm_trials"] is None and never["check"] == {}
    text = summary([row, never], ["command: x"], 16)
    assert "| m | 0 | 5.000 | 4.800 | 3 | 0.19 | 12 | store | 0.61 / 0.4 | -, - |" in text
    assert "reaching the cold run's final: 1 of 2; median share of the 16-trial budget inf " \
        "[0.19, inf]" in text


def test_bench_refuses_an_unknown_arm_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "tools/bench.py", "m.onnx", "--arms", "harl,nope",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("bench: error: unknown arm 'nope'; known arms: harl, ")
    assert len(proc.stderr.splitlines()) == 1


def arm_run(arm, seed, latency_ms):
    spec = RunSpec(Path("m.onnx"), "m", arm, 10, seed)
    return RunResult(spec, Path(f"/x/{arm}-{seed}"), 0, report={"tune_seconds": 5.0},
                     curve=[CurvePoint(10, 50.0, latency_ms)] if latency_ms else [],
                     latency_ms=latency_ms)


def test_each_arm_is_paired_with_the_baseline_of_its_own_seed(tmp_path):
    runs = [arm_run("harl", 0, 2.0), arm_run("harl", 1, 4.0), arm_run("harl", 2, 1.0),
            arm_run("no-prior", 0, 3.0), arm_run("no-prior", 1, 3.0),
            arm_run("no-prior", 2, None),  # failed: no pair
            arm_run("no-nests", 0, 1.0), arm_run("no-nests", 1, 4.4), arm_run("no-nests", 2, 0.9),
            arm_run("sketch-uniform", 5, 1.0)]  # no harl run of seed 5
    rows = paired_rows(runs, "harl")
    assert rows == [["m", "10", "no-nests", "3", "0.900", "0.500", "1.100", "2/3"],
                    ["m", "10", "no-prior", "2", "1.125", "0.750", "1.500", "1/2"],
                    ["m", "10", "sketch-uniform", "0", "n/a", "n/a", "n/a", "n/a"]]
    refs = {"m": {ONNXRUNTIME: 2.0, UNTUNED: 10.0}}
    assert [row[2] for row in summary_rows(runs, refs, "harl")] == [
        "harl", "no-nests", "no-prior", "sketch-uniform"]  # the baseline first
    text = write_summary(tmp_path / "summary.md", ["header"], runs, refs, [], "harl")
    assert "## Each arm against harl, seed by seed" in text
    assert "| m | 10 | no-prior | 2 | 1.125 | 0.750 | 1.500 | 1/2 |" in text
    assert "- no-prior: `--strategy harl`, `cost_prior = false`" in text
    assert "| model | trials | arm | latency / harl |" in text
    write_runs_csv(tmp_path / "runs.csv", runs, refs, "harl")
    table = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert [(r["arm"], r["strategy"], r["vs_harl"]) for r in table[3:5]] == [
        ("no-prior", "harl", "1.5"), ("no-prior", "harl", "0.75")]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run([sys.executable, "tools/bench.py", "--smoke", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    return proc, out


@pytest.mark.slow  # a developer tool, not the product: kept out of CI for time (93 s)
def test_smoke_runs_every_stage(smoke):
    proc, out = smoke
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    assert first == f"command: python tools/bench.py --smoke --out {out}"
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert sorted(r["strategy"] for r in rows) == ["harl", "metaschedule"]
    for r in rows:
        assert r["model"] == "mlp" and r["exit_code"] == "0" and r["verified"] == "true"
        assert int(r["trials_done"]) >= 6 and float(r["latency_ms"]) > 0
        # --smoke times in 2 fresh processes; the latency is the median of their medians.
        per_process = [float(v) for v in r["latency_ms_per_process"].split()]
        assert len(per_process) == 2 and float(r["latency_ms"]) == pytest.approx(
            sum(per_process) / 2, rel=1e-3)
        assert float(r["vs_onnxruntime"]) > 0 and float(r["tune_wall_s"]) > 0
        assert float(r["build_s_per_trial"]) > 0 and float(r["run_s_per_trial"]) > 0
        # harl.tune ran with --no-evaluate: the verification above is the bench's own.
        report = json.loads((Path(r["work_dir"]) / "report.json").read_text())
        assert report["verified"] is None and report["latency_ms"] == {}
    ms_row = next(r for r in rows if r["strategy"] == "metaschedule")
    assert float(ms_row["vs_metaschedule"]) == 1.0
    summary = (out / "summary.md").read_text()
    assert summary.splitlines()[3].startswith("command: python tools/bench.py --smoke")
    assert "machine: " in summary and "versions: tvm " in summary
    table = [line for line in summary.splitlines() if line.startswith("| mlp | 6 |")]
    assert len(table) == 2 and "| metaschedule | 1.00x |" in table[0]
    png = out / "mlp_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "![mlp_curves](mlp_curves.png)" in summary


@pytest.mark.slow  # a developer tool, not the product: kept out of CI for time
def test_compare_work_dirs_times_the_smoke_runs_with_and_without_picks(smoke):
    proc, out = smoke
    assert proc.returncode == 0
    work_dirs = sorted(str(p) for p in (out / "mlp").iterdir() if p.is_dir())
    compare = subprocess.run([sys.executable, "tools/compare_work_dirs.py",
                              "tasks/examples/mlp.onnx", *work_dirs, "--rounds", "1",
                              "--processes", "2", "--with-picks"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert compare.returncode == 0, compare.stdout[-2000:] + compare.stderr[-3000:]
    lines = compare.stdout.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("build "))) + 1:]
    assert table[0].startswith(ONNXRUNTIME) and table[-1].startswith(UNTUNED)
    # OpenVINO's row follows onnxruntime's where openvino is installed
    openvino = int(table[1].startswith(OPENVINO))
    assert openvino == int(openvino_installed())
    assert len(table) == 2 + openvino + 2 * len(work_dirs)  # each dir, and each with its picks
    for work_dir in work_dirs:
        assert sum(line.startswith(f"{work_dir} + picks ") for line in table) == 1
    first = next(line for line in table if line.startswith(work_dirs[0] + " "))
    assert " 1.00x " in first and len(first.split("x  ")[1].split(", ")) == 2


@pytest.mark.slow  # a developer tool, not the product: kept out of CI for time
def test_kernel_times_times_each_kernel_of_a_smoke_run_in_place(smoke):
    proc, out = smoke
    assert proc.returncode == 0
    work_dir = next(p for p in sorted((out / "mlp").iterdir()) if p.name.startswith("harl"))
    report = json.loads((work_dir / "report.json").read_text())
    tool = subprocess.run([sys.executable, "tools/kernel_times.py", "tasks/examples/mlp.onnx",
                           str(work_dir), "--repeats", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert tool.returncode == 0, tool.stdout[-2000:] + tool.stderr[-3000:]
    lines = tool.stdout.splitlines()
    assert lines[0].startswith("model ") and " kernel calls alone " in lines[0]
    assert lines[3].split()[:3] == ["ms", "share", "calls"]
    rows = {line.split()[-1]: line.split() for line in lines[4:]}
    measured = [task for task in report["tasks"] if task["best_ms"] is not None]
    assert measured
    for task in measured:  # the mlp calls each of its functions once
        row = rows[task["name"]]
        assert float(row[0]) > 0 and row[2] == "1"
        assert float(row[3]) == pytest.approx(task["best_ms"] * task["weight"], rel=1e-3)
        assert row[4] == str(task["trials"]) + ("*" if task["naive"] else "")


def test_kernel_rows_place_each_kernel_against_the_fma_peak():
    kernel_ms = {"copy": 0.5, "fused_matmul": 2.0, "other": 0.1}
    calls = {"copy": 1, "fused_matmul": 2, "other": 1}
    flops = {"fused_matmul": 1e9, "copy": 0.0}  # "other" is no task of the model
    tasks = {"fused_matmul": {"best_ms": 0.9, "weight": 2.0, "trials": 8, "naive": False}}
    rows = kernel_rows(4.0, kernel_ms, calls, flops, tasks, peak_gflops=2000.0,
                       cold_ms={"fused_matmul": 3.0})
    assert [row["function"] for row in rows] == ["fused_matmul", "copy", "other"]
    matmul, copy, other = rows
    assert matmul["cold_ms"] == 3.0 and copy["cold_ms"] is None
    assert matmul["gflops"] == pytest.approx(1000.0)  # 2 GFLOP in 2 ms
    assert matmul["peak_percent"] == pytest.approx(50.0) and matmul["mflop"] == 1000.0
    assert matmul["estimate_ms"] == pytest.approx(1.8) and matmul["share"] == 0.5
    assert copy["mflop"] == 0.0 and copy["gflops"] is None and copy["peak_percent"] is None
    assert other["mflop"] is None and other["gflops"] is None and other["trials"] is None


@pytest.fixture(scope="module")
def tuned_cnn(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("cnn")
    proc = harl_tune(ROOT / "tasks/examples/cnn.onnx", "--trials", 6, "--work-dir", work_dir,
                     "--no-evaluate", "--quiet")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return work_dir


@pytest.mark.slow  # a developer tool, not the product: kept out of CI for time
def test_kernel_times_places_each_kernel_against_the_measured_fma_peak(tuned_cnn, tmp_path):
    report = json.loads((tuned_cnn / "report.json").read_text())
    flops = {task["name"]: task["flop"] for task in report["tasks"]}
    out = tmp_path / "kernels.json"
    tool = subprocess.run([sys.executable, "tools/kernel_times.py", "tasks/examples/cnn.onnx",
                           str(tuned_cnn), "--repeats", "3", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert tool.returncode == 0, tool.stdout[-2000:] + tool.stderr[-3000:]
    lines = tool.stdout.splitlines()
    assert lines[1].startswith("fp32 FMA peak on ") and " measured " in lines[1]
    assert "GFLOP/s" in lines[2] and "of the measured peak" in lines[2]
    assert lines[3].split()[5:10] == ["MFLOP", "GFLOP/s", "%peak", "cold", "ms"]
    printed = {line.split()[-1]: line.split() for line in lines[4:]}
    data = json.loads(out.read_text())
    assert data["fma_peak_gflops"] > 0 and data["threads"] >= 1
    assert math.isfinite(data["model_gflops"]) and data["model_gflops"] > 0
    assert [row["function"] for row in data["kernels"]] == list(printed)  # all of them, in order
    assert data["kernels_cold_ms"] == pytest.approx(sum(r["cold_ms"] for r in data["kernels"]))
    assert all(row["cold_ms"] > 0 for row in data["kernels"])
    convs = [row for row in data["kernels"] if "conv2d" in row["function"]]
    assert len(convs) == 2
    for row in data["kernels"]:
        assert row["mflop"] * 1e6 == pytest.approx(flops[row["function"]])  # report.json's
        cells = printed[row["function"]]
        if not row["mflop"]:
            assert cells[6:8] == ["-", "-"]
            continue
        assert row["gflops"] == pytest.approx(row["mflop"] * row["calls"] / row["ms"])  # MFLOP/ms
        assert math.isfinite(row["peak_percent"]) and row["peak_percent"] > 0
        assert float(cells[6]) == pytest.approx(row["gflops"], rel=1e-3)
        assert float(cells[7].rstrip("%")) == pytest.approx(row["peak_percent"], rel=1e-2)


@pytest.mark.slow  # a developer tool, not the product: kept out of CI for time
def test_sketch_usage_places_every_searched_record_of_the_smoke_runs(smoke):
    from sketch_usage import sketch_usage

    proc, out = smoke
    assert proc.returncode == 0
    for work_dir in sorted(p for p in (out / "mlp").iterdir() if p.is_dir()):
        usage = sketch_usage(work_dir)
        assert usage, work_dir
        for workload in usage:
            counts = [count for count, _ in workload["sketches"]]
            bests = [best for _, best in workload["sketches"] if best is not None]
            assert sum(counts) == workload["records"]  # each record in exactly one sketch
            assert min(bests) == pytest.approx(workload["best_s"])
        if work_dir.name.startswith("metaschedule"):  # its space has no serial sketches
            assert all(count == 0 for workload in usage
                       for count, _ in workload["sketches"][workload["spaces"]:])


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "tools/bench.py", "light:nosuchnet",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("bench: error: no ONNX light model 'nosuchnet'")


def test_fma_kernel_measures_a_plausible_peak(tmp_path):
    from benchlib.peak import measure_peak

    peak = measure_peak(tmp_path, threads=1, seconds=0.05, repeats=1)
    assert peak.lanes in (8, 16)
    assert 1.0 < peak.gflops_one_core < 1000.0 and peak.gflops_all_cores > 1.0


def test_roofline_kernels_compute_what_their_flop_counts_claim(tmp_path):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from benchlib.roofline import conv_kernel, matmul_kernel
    from onnx import numpy_helper

    matmul, conv = matmul_kernel(tmp_path, 8), conv_kernel(tmp_path, 5, channels=4)
    assert matmul.flop == 2 * 8 ** 3 and conv.flop == 2 * 4 * 5 * 5 * 4 * 9
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    weight = numpy_helper.to_array(onnx.load(str(matmul.path)).graph.initializer[0])
    (y,) = ort.InferenceSession(str(matmul.path)).run(None, {"X": x})
    np.testing.assert_allclose(y, x @ weight, rtol=1e-5)
    (y,) = ort.InferenceSession(str(conv.path)).run(
        None, {"X": np.ones((1, 4, 5, 5), np.float32)})
    kernel = numpy_helper.to_array(onnx.load(str(conv.path)).graph.initializer[0])
    assert y.shape == (1, 4, 5, 5)  # padded: same size; an inner pixel sees the whole 3x3 kernel
    np.testing.assert_allclose(y[0, :, 2, 2], kernel.sum(axis=(1, 2, 3)), rtol=1e-5)


@pytest.mark.slow
def test_roofline_end_to_end_with_small_kernels(tmp_path):
    proc = subprocess.run([sys.executable, "tools/bench.py", "--roofline", "--roofline-size",
                           "64", "--conv-size", "8", "--roofline-trials", "4", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "roofline.md").read_text()
    assert "measured fp32 peak" in text and "numpy BLAS fp32 matmul" in text
    rows = [line for line in text.splitlines() if line.startswith(("| matmul", "| conv2d"))]
    assert len(rows) == 2 and all(row.endswith("| yes |") for row in rows)
