"""Ablation arms as config values: each level's agent replaced by a non-learning one (or TVM's),
its learning shown in the metrics, and every arm run end to end on real TVM (llvm)."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import EXAMPLES, harl_tune_here

from harl.agents.sketch_chooser import SketchChooser, SketchConfig
from harl.agents.task_allocator import AllocatorConfig, TaskAllocator
from harl.agents.tile_policy import TilePolicy, TilePolicyConfig
from harl.agents.tile_tuner import Site, TileTuner, TileTunerConfig
from harl.config_file import ConfigError, effective_config
from harl.frontend.tasks import TuningTask
from harl.search import make_plan

MODEL = EXAMPLES / "mlp.onnx"


@pytest.mark.parametrize("make", [
    lambda: AllocatorConfig(method="bandit"),
    lambda: SketchConfig(method="softmax"),
    lambda: TileTunerConfig(method="sac"),
])
def test_an_unknown_arm_is_refused(make):
    with pytest.raises(ValueError, match="must be one of"):
        make()


def test_an_unknown_arm_in_a_config_file_is_one_line(tmp_path):
    (tmp_path / "c.toml").write_text('[search.tile]\nmethod = "sac"\n')
    with pytest.raises(ConfigError, match="tile.method must be one of ppo, prior-only"):
        effective_config(MODEL, tmp_path / "c.toml")


def test_uniform_sketches_split_a_batch_evenly_least_tried_first():
    chooser = SketchChooser(3, SketchConfig(method="uniform"), seed=0)
    for _ in range(5):
        chooser.update(0, 1e-3)  # a good sketch: the bandit would favour it, uniform does not
    assert chooser.allocate(7).tolist() == [2, 3, 2]
    assert chooser.allocate(9).tolist() == [3, 3, 3]
    learned = SketchChooser(3, SketchConfig(), seed=0)
    for sketch in range(3):
        for _ in range(2):
            learned.update(sketch, 1e-3 if sketch == 0 else 1e-2)
    assert learned.allocate(40)[0] > 20  # the bandit does favour it


def _tile_tuner(method: str, **config) -> TileTuner:
    cfg = TileTunerConfig(method=method, trajectory_length=3, **config)
    return TileTuner([Site("tile", 3)], cfg, seed=0, policy=TilePolicy(TilePolicyConfig(), 0))


def _score(states):
    """Higher for more of the extent in the innermost level: a landscape with one best."""
    return np.array([math.log2(state[0][-1]) for state in states])


def test_prior_only_never_trains_the_policy_and_ppo_does():
    for method, trains in (("prior-only", False), ("ppo", True)):
        tuner = _tile_tuner(method)
        before = {k: v.copy() for k, v in tuner.policy.state_arrays().items()}
        tuner.search([((64, 1, 1),), ((16, 4, 1),)], _score)
        losses = tuner.learn()
        after = tuner.policy.state_arrays()
        changed = any(not np.array_equal(before[k], after[k]) for k in before)
        assert changed is trains and ("approx_kl" in losses) is trains


def test_random_moves_ignore_the_prior():
    """With the prior, a trajectory follows the predicted improvement; random moves do not."""
    def reach(method: str) -> float:
        tuner = _tile_tuner(method, epsilon=0.0, epsilon_range=(0.0, 0.5))
        found = tuner.search([((256, 1, 1),)] * 8, _score, learn=False)
        return float(np.mean(_score(found.bests)))

    torch.manual_seed(0)
    assert reach("prior-only") > reach("random-moves") + 1.0


def test_fixed_exploration_keeps_its_settings():
    fixed, adaptive = _tile_tuner("ppo", adaptive=False), _tile_tuner("ppo")
    for latency in (1.0, 0.5, 0.5, 0.5, 0.5):
        fixed.observe_batch(latency)
        adaptive.observe_batch(latency)
    assert (fixed.epsilon, fixed.fresh_share, fixed.trajectory_length) == (0.15, 0.25, 3)
    assert (adaptive.epsilon, adaptive.trajectory_length) != (0.15, 3)
    assert fixed.best_measured == 0.5


def test_the_allocator_sets_its_chosen_value_beside_the_realised_reward():
    allocator = TaskAllocator([1.0, 1.0], [1e6, 1e6], AllocatorConfig(), seed=0)
    first = allocator.select()
    assert math.isnan(allocator.chosen_value[first])  # a first visit: no value yet
    allocator.update(first, 2, 1e-3)
    allocator.update(1 - first, 2, 1e-3)
    chosen = allocator.select()
    assert allocator.chosen_value[chosen] > 0


@pytest.mark.parametrize("text, scheduler, strategy, nests", [
    ('[allocator]\nmethod = "gradient"\n', "GradientBased", "HarlSearchStrategy", True),
    ('[allocator]\nmethod = "round-robin"\n[nests]\nmeasure = false\n', "RoundRobin",
     "HarlSearchStrategy", False),
    ('[search.tile]\nmethod = "evolutionary"\n', "HarlTaskScheduler", "EvolutionarySearch",
     True),
])
def test_each_arm_builds_its_plan(tmp_path, text, scheduler, strategy, nests):
    (tmp_path / "c.toml").write_text(text)
    config = effective_config(MODEL, tmp_path / "c.toml")
    plan = make_plan("harl", seed=0, num_cores=1,
                     tasks=[TuningTask("t", mod=None, weight=1.0, flop=1e6)],
                     search=config.search, allocator=config.allocator, nests=config.nests,
                     cost_model=config.cost_model)
    assert type(plan.task_scheduler).__name__ == scheduler
    assert type(plan.make_search_strategy(0)).__name__ == strategy
    assert (plan.naive_nests is not None) is nests
    assert (plan.allocator is not None) is (scheduler == "HarlTaskScheduler")
    assert bool(plan.measure_callbacks) is (scheduler == "HarlTaskScheduler")


def _metric_keys(work_dir) -> set[str]:
    keys = set()
    for line in (work_dir / "metrics.jsonl").read_text().splitlines():
        keys |= set(json.loads(line))
    return keys


# Every arm value at least once, on the MLP's 3 tasks in batches of 2.
ARMS = {
    "non-learning": '[allocator]\nmethod = "round-robin"\n[search]\ntransplant_share = 0.0\n'
                    '[search.sketch]\nmethod = "uniform"\n'
                    '[search.tile]\nmethod = "random-moves"\nadaptive = false\n'
                    '[nests]\nmeasure = false\n',
    "tvm-allocator": 'cost_prior = false\n[allocator]\nmethod = "gradient"\n'
                     '[search.tile]\nmethod = "ppo"\n',
    "evolutionary": '[search.tile]\nmethod = "evolutionary"\n',
}


@pytest.mark.parametrize("arm", ARMS)
def test_every_arm_tunes_and_verifies_end_to_end(tmp_path, arm):
    (tmp_path / "c.toml").write_text(ARMS[arm] + "[verify]\ntiming_seconds = 1.0\n"
                                     "latency_repeats = 3\n")
    work_dir = tmp_path / "run"
    proc = harl_tune_here(MODEL, "--config", tmp_path / "c.toml", "--trials", 6,
                          "--trials-per-batch", 2, "--work-dir", work_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    assert report["verified"] is True and report["trials_done"] == 6
    keys = _metric_keys(work_dir) if (work_dir / "metrics.jsonl").exists() else set()
    if arm == "non-learning":
        assert report["config"]["search"]["sketch"]["method"] == "uniform"
        assert not any(task["naive"] for task in report["tasks"])
        assert not any(key.startswith(("alloc/", "tile/policy")) for key in keys)
    elif arm == "tvm-allocator":
        assert report["config"]["allocator"]["method"] == "gradient"
        assert report["config"]["search"]["tile"]["method"] == "ppo"
        assert not any(key.startswith("alloc/") for key in keys)
    else:  # MetaSchedule's search: none of the sketch chooser's or tile tuner's metrics
        assert "alloc/chosen_value" in keys
        assert not any(key.startswith(("tile/", "sketch/")) for key in keys)
