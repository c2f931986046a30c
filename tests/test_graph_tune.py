"""`python -m harl.tune --graph greedy|eqsat|rl` on real TVM (llvm): the graph level in a run, its
resume, its report, a search that fails, and plain TVM rebuilding the rewritten graph."""

import json
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT, harl_tune_here, tiny_graph_config, trial_record_lines

TRANSFORMER = EXAMPLES / "transformer_block.onnx"

@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return tiny_graph_config(tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="module")
def greedy_run(tmp_path_factory, tiny_config):
    work_dir = tmp_path_factory.mktemp("greedy")
    proc = harl_tune_here(TRANSFORMER, "--graph", "greedy", "--trials", 6, "--work-dir",
                          work_dir, "--config", tiny_config)
    return proc, work_dir


def _report(work_dir):
    return json.loads((work_dir / "report.json").read_text())


def test_greedy_rewrites_tunes_within_the_cap_and_verifies(greedy_run):
    proc, work_dir = greedy_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _report(work_dir)
    assert report["verified"] is True
    graph = report["graph"]
    assert graph["method"] == "greedy" and graph["rewritten"] and graph["applied"]
    assert graph["estimated_ms_after"] < graph["estimated_ms_before"]
    assert graph["changed_by_second_search"] is not None  # the second search ran
    assert report["trials_done"] == 6 and len(trial_record_lines(work_dir)) == 6
    assert "graph (greedy): " in proc.stdout
    assert json.loads((work_dir / "graph.json").read_text())["applied"] == graph["applied"]
    assert (work_dir / "model_rewritten.json").exists()


def test_plain_tvm_rebuilds_the_rewritten_graph(greedy_run):
    _, work_dir = greedy_run
    tool = subprocess.run([sys.executable, str(ROOT / "tools" / "build_with_tvm.py"),
                           str(TRANSFORMER), str(work_dir)],
                          capture_output=True, text=True, timeout=300)
    assert tool.returncode == 0, tool.stdout + tool.stderr
    assert f"graph: {work_dir / 'model_rewritten.json'}" in tool.stdout
    assert "outputs match: True" in tool.stdout


def test_a_resume_reuses_the_saved_graph(greedy_run, tiny_config, monkeypatch):
    proc, work_dir = greedy_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    applied = _report(work_dir)["graph"]["applied"]

    def no_search(*args, **kwargs):
        raise AssertionError("a resumed run searched the graph again")

    monkeypatch.setattr("harl.graph.search.greedy.greedy", no_search)
    resumed = harl_tune_here(TRANSFORMER, "--graph", "greedy", "--trials", 8, "--work-dir",
                             work_dir, "--config", tiny_config, "--no-evaluate")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming with the graph chosen before" in resumed.stdout
    report = _report(work_dir)
    assert report["graph"]["applied"] == applied and report["graph"].get("dropped") is None
    assert report["trials_done"] == 8 and len(trial_record_lines(work_dir)) == 8


def test_eqsat_end_to_end(tmp_path, tiny_config):
    proc = harl_tune_here(TRANSFORMER, "--graph", "eqsat", "--trials", 6, "--work-dir",
                          tmp_path, "--config", tiny_config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _report(tmp_path)
    assert report["verified"] is True
    graph = report["graph"]
    assert graph["method"] == "eqsat" and graph["egraph_enodes"] > 0
    assert graph["estimated_ms_after"] <= graph["estimated_ms_before"]
    assert report["trials_done"] == 6 and len(trial_record_lines(tmp_path)) == 6
    assert "graph (eqsat): " in proc.stdout


def test_rl_end_to_end(tmp_path, tiny_config):
    # Tuning only: the graph stage checks a rewritten graph against the original itself.
    proc = harl_tune_here(TRANSFORMER, "--graph", "rl", "--trials", 6, "--work-dir",
                          tmp_path, "--config", tiny_config, "--no-evaluate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _report(tmp_path)
    graph = report["graph"]
    assert graph.get("dropped") is None
    # the shipped policy (trained on a CPU run's rules): its zero-shot episode, two sampled
    # ones (one update), its most likely one unless the 12 estimates ran out
    assert graph["method"] == "rl" and graph["rl_policy"] == "shipped"
    assert graph["rl_episodes"] in (3, 4) and graph["rl_updates"] == 1
    assert graph["estimated_ms_after"] <= graph["estimated_ms_before"]
    assert graph["rewritten"] == bool(graph["applied"])
    assert len(graph["rl_path_estimated_ms"]) == len(graph["applied"])
    assert graph["rl_path_estimated_ms"][-1:] in ([], [graph["estimated_ms_after"]])
    assert (tmp_path / "model_rewritten.json").exists() == graph["rewritten"]
    assert {"losses/approx_kl", "losses/entropy"} <= set(graph["rl_ppo"])
    assert graph["second_search"]["rl_policy"] == "shipped"
    assert report["trials_done"] == 6 and len(trial_record_lines(tmp_path)) == 6
    assert "graph (rl): " in proc.stdout


def test_a_search_that_raises_leaves_the_original_graph(tmp_path, tiny_config, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("broken search")

    monkeypatch.setattr("harl.graph.search.greedy.greedy", broken)
    proc = harl_tune_here(EXAMPLES / "mlp.onnx", "--graph", "greedy", "--trials", 3,
                          "--work-dir", tmp_path, "--config", tiny_config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = [line for line in proc.stdout.splitlines()
              if "broken search" in line and line.startswith("harl: graph:")]
    assert failed == ["harl: graph: the greedy search failed (broken search); the original "
                      "graph stands",
                      "harl: graph: the second greedy search failed (broken search); the graph "
                      "being tuned stands"]
    report = _report(tmp_path)
    assert report["verified"] is True and report["graph"]["rewritten"] is False
    assert "broken search" in report["graph"]["dropped"]
    assert not (tmp_path / "model_rewritten.json").exists()
    assert report["trials_done"] == 3


def test_a_rewrite_that_does_not_match_is_dropped(tmp_path, tiny_config, monkeypatch):
    monkeypatch.setattr("harl.graph.pipeline.GraphStage.mismatch",
                        lambda self, original, rewritten: "output 'y' differs by 1")
    proc = harl_tune_here(TRANSFORMER, "--graph", "greedy", "--trials", 2, "--work-dir",
                          tmp_path, "--config", tiny_config, "--no-evaluate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("harl: graph: the rewritten graph does not match the original (output 'y' differs "
            "by 1); the original graph stands") in proc.stdout
    graph = _report(tmp_path)["graph"]
    assert not graph["rewritten"] and graph["applied"] == [] and graph["dropped_rewrites"]
    assert not (tmp_path / "model_rewritten.json").exists()


@pytest.mark.parametrize("changed", [False, True])
def test_the_second_search_runs_inside_the_loop_and_a_new_graph_gets_the_rest(
        tmp_path, tiny_config, monkeypatch, changed):
    """The second search runs once the first share is measured, inside the tuning loop; where
    it keeps the graph the loop goes on, where it changes it the loop ends and the new graph's
    tasks get the rest of the trials in a loop of their own (here an equal copy, as a new
    graph)."""
    import harl.tune
    from harl.database import open_database
    from harl.graph.pipeline import GraphStage, trials_in

    second, step = GraphStage.second, harl.tune._tune_step
    seen, loops = [], []

    def spying(self, original, current):
        seen.append(trials_in(open_database(tmp_path)))
        chosen = second(self, original, current)
        return type(chosen)(dict(chosen.functions)) if changed else chosen

    def counting(tasks, resume, *, trials, **kwargs):
        loops.append(trials)
        return step(tasks, resume, trials=trials, **kwargs)

    monkeypatch.setattr(GraphStage, "second", spying)
    monkeypatch.setattr(harl.tune, "_tune_step", counting)
    proc = harl_tune_here(EXAMPLES / "mlp.onnx", "--graph", "greedy", "--trials", 8,
                          "--trials-per-batch", 2, "--work-dir", tmp_path, "--config",
                          tiny_config, "--no-evaluate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (measured,) = seen  # once, between the first share (6 of 8 by default) and the end
    assert 6 <= measured < 8
    assert loops == ([8, 8 - measured] if changed else [8])
    report = _report(tmp_path)
    assert report["trials_done"] == 8 and len(trial_record_lines(tmp_path)) == 8
