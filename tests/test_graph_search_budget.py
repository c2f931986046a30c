"""tools/graph_search_budget.py on the transformer block: greedy and a tiny rl search, one seed;
each run's curve counts the distinct graphs its search costed, its best never rises, and the
table reports every method."""

import json
import sys

from conftest import EXAMPLES, ROOT, tiny_graph_config

sys.path.insert(0, str(ROOT / "tools"))

import graph_search_budget  # noqa: E402


def test_curves_and_table_of_greedy_and_rl(tmp_path, capsys):
    config = tiny_graph_config(tmp_path)
    out = tmp_path / "out"
    model = EXAMPLES / "transformer_block.onnx"
    assert graph_search_budget.main([str(model), "--methods", "greedy,rl", "--seeds", "3",
                                     "--out", str(out), "--config", str(config)]) == 0
    for method in ("greedy", "rl"):
        run = json.loads((out / "transformer_block" / f"{method}-seed3.json").read_text())
        assert run["method"] == method and run["seed"] == 3
        estimates = [n for n, _, _ in run["curve"]]
        best = [ms for _, ms, _ in run["curve"]]
        assert estimates == list(range(1, len(estimates) + 1)) and len(estimates) > 1
        assert all(b <= a for a, b in zip(best, best[1:], strict=False))
        # the search's own count of distinct graphs and its result agree with the curve's
        assert run["estimates"] == run["summary"]["graphs_costed"] == estimates[-1]
        assert best[0] == run["initial_ms"] == run["summary"]["estimated_ms_before"]
        assert best[-1] == run["best_ms"] == run["summary"]["estimated_ms_after"]
    # the shipped policy's zero-shot episode, [graph.rl] episodes = 2, its most likely one
    assert run["summary"]["rl_episodes"] == 4 and run["summary"]["rl_policy"] == "shipped"
    printed = capsys.readouterr().out
    assert printed.startswith("command: python tools/graph_search_budget.py ")
    summary = (out / "summary.md").read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| greedy |")
            or line.startswith("| rl |")]
    assert len(rows) == 2 and all(row in printed for row in rows)


def test_a_missing_model_is_one_line(tmp_path, capsys):
    assert graph_search_budget.main([str(tmp_path / "nope.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such model" in err
