"""tools/learning_metrics.py: each level's learning read from a synthetic metrics.jsonl."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

from learning_metrics import main, read_metrics, summarise  # noqa: E402


def write_metrics(path, lines, tail=""):
    path.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(line) + "\n" for line in lines) + tail
    (path / "metrics.jsonl").write_text(text)
    return path


def harl_lines():
    """Six batches: PPO updates whose loss falls, an allocator whose values misrank its rewards,
    a sketch chooser whose values rank what each sketch realised, a cost model gaining trust."""
    lines = []
    for i in range(6):
        lines.append({"time_s": 1.0 + i, "task_id": i % 2, "task_trials": 4,
                      "tile/policy_loss": 1.0 - 0.1 * i, "tile/value_loss": 4.0 - i,
                      "tile/entropy": 1.0, "tile/approx_kl": 0.01, "tile/model_trust": 0.1 * i,
                      f"sketch/value_{i % 3}": float(i), f"sketch/realised_{i % 3}": 1.0 + i,
                      "sketch/value_7": 10.0 + i, "sketch/realised_7": 10.0 + i,
                      "sketch/share_0": 0.5})
        lines.append({"time_s": 1.5 + i, "task_id": i % 2, "alloc/task": float(i % 2),
                      "alloc/reward": 0.0 if i < 2 else 0.5 * i,
                      "alloc/chosen_value": None if i == 0 else float(2 * i % 5)})
    return lines


def test_each_level_is_summarised(tmp_path):
    lines = harl_lines()
    lines[2]["tile/explained_variance"] = 0.5  # a key written by newer runs only
    work_dir = write_metrics(tmp_path / "harl", lines, tail='{"time_s": 9, "tile/pol')  # cut
    summary = summarise(read_metrics(work_dir / "metrics.jsonl"))
    assert summary["lines"] == 12
    ppo = summary["tile_ppo"]
    assert ppo["updates"] == 6
    assert ppo["policy_loss"] == {"n": 6, "first": pytest.approx(0.95),
                                  "last": pytest.approx(0.55)}  # thirds of two values each
    assert ppo["explained_variance"] == {"n": 1, "first": 0.5, "last": 0.5}
    assert ppo["clip_fraction"] is None
    alloc = summary["allocator"]
    assert alloc["value_vs_reward"]["n"] == 5  # the null value of the first batch is no pair
    assert alloc["value_vs_reward"]["rho"] == pytest.approx(-0.5)  # values 2 4 1 3 0
    assert alloc["reward_positive"] == {"n": 6, "share": pytest.approx(4 / 6)}
    assert summary["sketch"]["value_vs_realised"] == {"n": 12, "rho": pytest.approx(1.0)}
    assert summary["cost_model"]["model_trust"] == {
        "n": 6, "first": pytest.approx(0.05), "last": pytest.approx(0.45)}


def test_a_run_without_agents_reads_na_and_json_matches(tmp_path, capsys):
    plain = write_metrics(tmp_path / "metaschedule", [{"time_s": 1.0, "task_id": 0}])
    missing = tmp_path / "empty"
    missing.mkdir()  # a work dir without a metrics.jsonl
    summary = summarise(read_metrics(plain / "metrics.jsonl"))
    assert summary["tile_ppo"]["updates"] == 0 and summary["cost_model"]["model_trust"] is None
    assert summary["allocator"] == {"value_vs_reward": None, "reward_positive": None}
    assert summary["sketch"] == {"value_vs_realised": None}
    harl = write_metrics(tmp_path / "harl", harl_lines())
    assert main([str(harl), str(plain), str(missing)]) == 0
    text = capsys.readouterr().out
    blocks = text.split("\n\n")
    assert blocks[0].startswith(f"{harl}: 12 metrics lines")
    assert "rho -0.50" in blocks[0] and "rho +1.00" in blocks[0] and "67%" in blocks[0]
    assert "0.05 -> 0.45" in blocks[0]  # model trust, first third -> last third
    assert blocks[1].count("n/a") == 11 and blocks[2].startswith(f"{missing}: 0 metrics lines")
    assert main([str(harl), str(plain), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[str(plain)] == summary and data[str(harl)]["tile_ppo"]["updates"] == 6


def test_the_command_line_refuses_a_missing_work_dir(tmp_path):
    proc = subprocess.run([sys.executable, "tools/learning_metrics.py", str(tmp_path / "nope")],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == f"learning_metrics: error: not a directory: {tmp_path / 'nope'}\n"
