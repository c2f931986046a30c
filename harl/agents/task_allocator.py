"""Top level: spend the trial budget where it buys the most end-to-end latency.

A non-stationary bandit over tasks. Each task's value is the learned gain per trial (an
exponentially weighted average of the observed reward: the drop of the weighted end-to-end
latency estimate per trial spent, relative to the estimate) plus a forward-looking chance: the
task's share of the end-to-end estimate over the trials it has had (Ansor's forward gradient).
The learned gain says what the task's recent batches bought; the chance says how much latency
is still there to buy, shrinking as trials accumulate. Without it, a task that holds most of the
latency but whose last batches found nothing (a rugged landscape, not a converged one) is
starved in favour of small tasks that keep improving by crumbs.
Every task is visited once before learning starts, and a task whose gain has not been observed
yet counts as good as the best, so none is starved. A task whose latency is known before tuning
(TVM's unscheduled loop nest, measured outside the budget) owes no first visit: it starts with
that latency as its best, and until its first batch its gain is what such a batch is expected
to buy per trial: its share of the end-to-end estimate times the part of a nest's latency that
first batches removed (a prior, averaged with this run's first batches as they come), over the
trials per batch. A nest that is a sliver of the model waits until the large tasks have had
their trials; a slow one (a depthwise conv run at a few GFLOP/s) is not left behind them.
That first batch is the task's first visit: what it bought (a tuned kernel in place of the
nest, often 80-90% of it) says nothing of what the next batches of any task will buy, so it
sets neither the task's learned gain nor the optimism that unobserved tasks borrow.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

SCHEDULERS = ("harl", "gradient", "round-robin")
"""who spends the trials over tasks: this bandit, or MetaSchedule's gradient-based or
round-robin task scheduler (ablation arms, `AllocatorConfig.method`)"""


@dataclass(frozen=True)
class AllocatorConfig:
    """Hyperparameters of the task allocator."""

    method: str = "harl"
    """harl | gradient | round-robin: which task scheduler spends the trials. `harl` is this
    bandit; `gradient` and `round-robin` are MetaSchedule's own schedulers at TVM's defaults,
    run with the rest of harl's search (ablation arms: what the allocator contributes)"""
    reward_decay: float = 0.5
    """weight of the newest reward in a task's running gain estimate"""
    forward_weight: float = 1.0
    """weight of the forward chance (share of the end-to-end estimate / trials) in a value.
    Under random sampling a task's next trial beats its best with chance ~1/trials, so the
    chance is the expected gain before the learned one is reliable; batches of 1-2 trials make
    the learned gain noisy, and it then chased small tasks (see docs/experiments.md).
    MetaSchedule weighs its forward term 0.8, its backward 0.2."""
    nest_drop_prior: float = 0.5
    """the part of a nest's latency a task's first batch is expected to remove, before any such
    batch of the run is seen (observed: 0.25-0.67 on average per model, medians 0.2-0.8)"""
    nest_drop_prior_weight: float = 2.0
    """how many observed first batches the prior counts as"""

    def __post_init__(self) -> None:
        if self.method not in SCHEDULERS:
            raise ValueError(f"allocator.method must be one of {', '.join(SCHEDULERS)}, "
                             f"not {self.method!r}")


@dataclass
class TaskState:
    """What the allocator knows of one task."""

    weight: float
    flop: float
    batches: int = 0
    trials: int = 0
    best_s: float = math.inf
    gain: float | None = None  # learned end-to-end gain per trial (relative); None: unobserved
    finished: bool = False
    known: bool = False  # best_s was measured before tuning: no first visit owed
    nest_drop: float | None = None  # a known task's: the part of its nest its first batch removed


class TaskAllocator:
    """Chooses the next task; learns from the end-to-end improvement each batch bought."""

    def __init__(self, weights: list[float], flops: list[float], config: AllocatorConfig,
                 seed: int = 0) -> None:
        self.config = config
        self.tasks = [TaskState(w, f) for w, f in zip(weights, flops, strict=True)]
        self.rng = np.random.default_rng(seed)
        self.chosen_value: dict[int, float] = {}
        """the value each task had when it was last chosen (the expected relative end-to-end
        gain per trial), set aside until its batch's realised reward is known, so the metrics
        can set one against the other; a first visit has none (NaN)"""

    def end_to_end_s(self) -> float:
        """Weighted sum of best latencies over measured tasks."""
        return sum(t.weight * t.best_s for t in self.tasks if math.isfinite(t.best_s))

    def _gain_scale(self) -> float:
        """The largest gain learned so far (a tiny positive number before any)."""
        return max([t.gain for t in self.tasks if t.gain is not None] + [1e-12])

    def select(self, busy: Collection[int] = ()) -> int | None:
        """The task to tune next, or None when every task is finished or `busy`.

        `busy` tasks have a batch still being measured: choosing one would wait for it.
        """
        open_tasks = [i for i, t in enumerate(self.tasks) if not t.finished and i not in busy]
        if not open_tasks:
            return None
        unvisited = [i for i in open_tasks
                     if self.tasks[i].batches == 0 and not self.tasks[i].known]
        if unvisited:  # largest expected work first
            choice = max(unvisited, key=lambda i: self.tasks[i].weight * self.tasks[i].flop)
            self.chosen_value[choice] = math.nan
            return choice
        total, gain_scale = self.end_to_end_s(), self._gain_scale()
        values = [self._value(self.tasks[i], total, gain_scale) for i in open_tasks]
        best = max(values)
        ties = [i for i, v in zip(open_tasks, values, strict=True) if v >= best - 1e-12]
        choice = int(self.rng.choice(ties))
        self.chosen_value[choice] = best
        return choice

    def _value(self, task: TaskState, total: float, gain_scale: float) -> float:
        """Learned gain per trial plus the forward chance of a visited task (`total`: the
        end-to-end estimate; `gain_scale`: the largest learned gain)."""
        share = task.weight * task.best_s / total if total > 0 and math.isfinite(
            task.best_s) else 1.0  # every candidate so far failed: all still to buy
        chance = share / max(1, task.trials)
        if task.known and task.batches == 0:
            gain = share * self.expected_nest_drop() / self._trials_per_batch()
        else:
            gain = gain_scale if task.gain is None else task.gain  # optimism when unobserved
        return gain + self.config.forward_weight * chance

    def expected_nest_drop(self) -> float:
        """The part of a nest's latency a first batch removes: the prior, weighed as
        `nest_drop_prior_weight` observations, averaged with this run's."""
        drops = [t.nest_drop for t in self.tasks if t.nest_drop is not None]
        weight = self.config.nest_drop_prior_weight
        if weight + len(drops) <= 0:
            return self.config.nest_drop_prior
        return (self.config.nest_drop_prior * weight + sum(drops)) / (weight + len(drops))

    def _trials_per_batch(self) -> float:
        batches = sum(t.batches for t in self.tasks)
        return max(1.0, sum(t.trials for t in self.tasks) / batches) if batches else 1.0

    def know_trials(self, task_id: int, trials: int, best_s: float) -> None:
        """Trials of the task an earlier loop measured (a resume, or the graph level's new
        graph whose tasks the first graph shared) where this allocator has no record of them:
        the task counts as visited, so that the tasks no loop has measured come first."""
        task = self.tasks[task_id]
        if trials <= 0 or task.trials > 0 or task.batches > 0:
            return
        task.trials, task.batches = trials, 1
        task.best_s = min(task.best_s, best_s)

    def know_latency(self, task_id: int, latency_s: float) -> None:
        """A latency of the task measured outside the trials: its best so far. Before its first
        batch, the task owes no visit, and its gain is what a first batch is expected to buy
        of its share (`_value`), not the optimistic best (which would buy every small task a
        batch)."""
        task = self.tasks[task_id]
        if not math.isfinite(latency_s):
            return
        task.best_s = min(task.best_s, latency_s)
        if task.batches == 0:
            task.known = True

    def update(self, task_id: int, trials: int, best_s: float) -> float:
        """Record a finished batch of `trials` whose task best is now `best_s`; returns reward."""
        task = self.tasks[task_id]
        before = self.end_to_end_s()
        previous_best = task.best_s
        task.best_s = min(task.best_s, best_s)
        task.trials += trials
        task.batches += 1
        if not math.isfinite(previous_best) or before <= 0 or trials <= 0:
            return 0.0
        reward = task.weight * (previous_best - task.best_s) / before / trials
        if task.known and task.batches == 1:  # its first visit: see the module's docstring
            if math.isfinite(best_s) and previous_best > 0:  # not a batch that all failed
                task.nest_drop = 1.0 - task.best_s / previous_best
            return reward
        decay = self.config.reward_decay
        prior = task.gain if task.gain is not None else self._gain_scale()  # optimistic start
        task.gain = (1 - decay) * prior + decay * reward
        return reward

    def to_json(self) -> list[dict]:
        """Every task's state, JSON-safe (an unmeasured best is null)."""
        return [{**vars(t), "best_s": t.best_s if math.isfinite(t.best_s) else None}
                for t in self.tasks]

    def load_json(self, tasks: list[dict]) -> bool:
        """Restore task states saved by `to_json`; False (nothing changed) if tasks differ."""
        if len(tasks) != len(self.tasks) or any(
                abs(saved["weight"] - t.weight) > 1e-9 or abs(saved["flop"] - t.flop) > 1e-3
                for saved, t in zip(tasks, self.tasks, strict=True)):
            return False
        for saved, task in zip(tasks, self.tasks, strict=True):
            best = saved["best_s"]
            task.batches, task.trials = int(saved["batches"]), int(saved["trials"])
            task.best_s = math.inf if best is None else float(best)
            task.gain = saved["gain"]
            task.known = bool(saved.get("known", False))  # absent in older checkpoints
            task.nest_drop = saved.get("nest_drop")
            if task.known and task.batches == 0:  # older checkpoints saved a gain of 0 here
                task.gain = None
        return True

    def finish(self, task_id: int) -> None:
        """The task can yield no more candidates."""
        self.tasks[task_id].finished = True
