"""The task allocator on synthetic task landscapes with known headroom."""

import numpy as np
import pytest

from harl.agents.task_allocator import AllocatorConfig, TaskAllocator


class FakeTask:
    """Best latency falls from `start` towards `floor` by `rate` of the gap per batch."""

    def __init__(self, start, floor, rate):
        self.best, self.floor, self.rate = start, floor, rate

    def measure(self, rng):
        self.best = self.floor + (self.best - self.floor) * (1 - self.rate * rng.uniform(0.5, 1.5))
        return self.best


def run(allocator_or_none, batches=40, seed=0):
    rng = np.random.default_rng(seed)
    tasks = [FakeTask(10.0, 1.0, 0.2), FakeTask(2.0, 1.95, 0.2), FakeTask(2.0, 1.95, 0.2)]
    visits = [0, 0, 0]
    for step in range(batches):
        task_id = step % 3 if allocator_or_none is None else allocator_or_none.select()
        best = tasks[task_id].measure(rng)
        visits[task_id] += 1
        if allocator_or_none is not None:
            allocator_or_none.update(task_id, trials=4, best_s=best)
    return visits, sum(t.best for t in tasks)


def test_budget_moves_to_the_task_with_headroom():
    for seed in range(3):
        allocator = TaskAllocator([1.0] * 3, [1e6] * 3, AllocatorConfig(), seed=seed)
        visits, total = run(allocator, seed=seed)
        assert visits[0] > sum(visits) / 3 + 1, visits  # more than round robin's third
        assert min(visits) >= 1  # every task visited
        _, round_robin_total = run(None, seed=seed)
        assert total < round_robin_total


class RuggedTask:
    """Improves rarely but by much (a rugged schedule landscape): with `p` per batch, a `jump`
    of the gap to `floor`."""

    def __init__(self, start, floor, p, jump):
        self.best, self.floor, self.p, self.jump = start, floor, p, jump

    def measure(self, rng):
        if rng.uniform() < self.p:
            self.best = self.floor + (self.best - self.floor) * (1 - self.jump)
        return self.best


def run_rugged(config, seed, batches=40):
    """One large rugged task against two small ones that improve by crumbs every batch."""
    rng = np.random.default_rng(seed)
    tasks = [RuggedTask(8.0, 4.0, 0.25, 0.3), FakeTask(1.0, 0.5, 0.05), FakeTask(1.0, 0.5, 0.05)]
    allocator = TaskAllocator([1.0] * 3, [1e6] * 3, config, seed=seed)
    visits = [0, 0, 0]
    for _ in range(batches):
        task_id = allocator.select()
        visits[task_id] += 1
        allocator.update(task_id, trials=4, best_s=tasks[task_id].measure(rng))
    return visits, sum(t.best for t in tasks)


def test_a_large_task_whose_last_batches_found_nothing_is_not_starved():
    for seed in range(3):
        visits, total = run_rugged(AllocatorConfig(), seed)
        assert visits[0] >= 0.4 * sum(visits), visits
        # The learned gain alone chases the small steady tasks and ends far worse.
        _, gain_only_total = run_rugged(AllocatorConfig(forward_weight=0.0), seed)
        assert total < gain_only_total - 1.0, (total, gain_only_total)


def test_finished_tasks_are_never_chosen_and_none_when_all_done():
    allocator = TaskAllocator([1.0, 1.0], [1.0, 1.0], AllocatorConfig())
    allocator.finish(0)
    assert all(allocator.select() == 1 for _ in range(5))
    allocator.finish(1)
    assert allocator.select() is None


def test_reward_is_relative_end_to_end_gain_per_trial():
    allocator = TaskAllocator([2.0, 1.0], [1.0, 1.0], AllocatorConfig(reward_decay=0.5))
    allocator.update(0, 4, 1.0)
    allocator.update(1, 4, 2.0)
    # e2e before = 2*1 + 1*2 = 4; task 0 drops to 0.5: gain 2*0.5 = 1 over 4 trials -> 1/4/4
    assert np.isclose(allocator.update(0, 4, 0.5), 1.0 / 4.0 / 4.0)
    first_gain = allocator.tasks[0].gain
    assert np.isclose(first_gain, 0.5 * 1e-12 + 0.5 / 16.0)
    # A batch that buys nothing halves the gain instead of zeroing it.
    assert allocator.update(1, 4, 2.0) == 0.0
    assert np.isclose(allocator.tasks[1].gain, 0.5 * first_gain)


def test_busy_tasks_are_not_chosen_and_none_when_only_busy_are_open():
    allocator = TaskAllocator([1.0, 1.0, 1.0], [3.0, 2.0, 1.0], AllocatorConfig())
    assert allocator.select() == 0  # unvisited: largest work first
    assert allocator.select(busy={0}) == 1  # ... unless it is being measured
    assert allocator.select(busy=[0, 1]) == 2
    for task_id in range(3):
        allocator.update(task_id, 4, 1.0)
    assert all(allocator.select(busy={1, 2}) == 0 for _ in range(5))
    allocator.finish(0)
    assert allocator.select(busy={1, 2}) is None  # the caller waits for a busy one
    assert allocator.select(busy={1}) == 2


def test_a_task_known_before_tuning_owes_no_visit_and_waits_while_it_is_a_sliver():
    # Task 2's unscheduled nest was measured before tuning: 1 us against tasks of ms.
    allocator = TaskAllocator([1.0, 1.0, 1.0], [1e6, 1e6, 1e3], AllocatorConfig(), seed=0)
    allocator.know_latency(2, 1e-6)
    allocator.know_latency(1, float("inf"))  # a nest that failed teaches nothing
    assert not allocator.tasks[1].known
    assert allocator.select() == 0  # unvisited tasks first, largest work first
    allocator.update(0, 4, 2e-3)
    assert allocator.select() == 1
    allocator.update(1, 4, 1e-3)
    visits = [0, 0, 0]
    for _ in range(30):  # the large tasks keep improving a little
        task_id = allocator.select()
        visits[task_id] += 1
        best = allocator.tasks[task_id].best_s * 0.99
        allocator.update(task_id, 4, best)
    assert visits[2] == 0, visits


def test_a_known_task_whose_nest_is_slow_is_tuned_first():
    allocator = TaskAllocator([1.0, 1.0], [1e6, 1e3], AllocatorConfig(), seed=0)
    allocator.know_latency(1, 5e-3)  # a slow nest: most of the end-to-end estimate
    allocator.update(0, 4, 1e-3)  # task 0 visited once
    assert allocator.select() == 1


def test_a_nest_replaced_lends_no_optimism_and_a_slow_nest_goes_before_second_visits():
    # MobileNet-V3's case: a classifier whose nest holds most of the estimate is tuned in one
    # batch; that reward must not make every task visited once look worth a second batch.
    allocator = TaskAllocator([1.0] * 4, [1e7, 1e7, 1e6, 1e6], AllocatorConfig(), seed=0)
    allocator.know_latency(2, 0.8e-3)  # a slow depthwise conv's nest
    allocator.know_latency(3, 10e-3)  # the classifier's nest
    allocator.update(allocator.select(), 2, 1e-3)  # the two unknown tasks' first visits
    allocator.update(allocator.select(), 2, 1e-3)
    assert allocator.select() == 3  # the largest share of the estimate
    reward = allocator.update(3, 2, 0.1e-3)
    assert reward > 0.3 and allocator.tasks[3].gain is None  # a first visit: no gain learned
    assert allocator.tasks[3].nest_drop == pytest.approx(0.99)
    assert allocator.expected_nest_drop() == pytest.approx((0.5 * 2 + 0.99) / 3)
    # 0.8 of 2.9 ms, expected to lose 2/3 of it in one batch, against 1 of 2.9 ms visited
    # once (2 trials), its gain unobserved: valued at the largest gain learned (none yet)
    assert allocator.select() == 2


def test_known_latencies_survive_the_checkpoint():
    allocator = TaskAllocator([1.0, 1.0], [1.0, 1.0], AllocatorConfig())
    allocator.know_latency(1, 1e-6)
    restored = TaskAllocator([1.0, 1.0], [1.0, 1.0], AllocatorConfig())
    assert restored.load_json(allocator.to_json())
    assert restored.tasks[1].known and restored.tasks[1].best_s == 1e-6
    assert restored.tasks[1].gain is None and restored.tasks[0].gain is None
    allocator.update(1, 2, 0.25e-6)
    assert restored.load_json(allocator.to_json())
    assert restored.tasks[1].nest_drop == pytest.approx(0.75)
    older = TaskAllocator([1.0, 1.0], [1.0, 1.0], AllocatorConfig())  # saved a gain of 0
    older.know_latency(1, 1e-6)
    saved = [{k: v for k, v in task.items() if k != "nest_drop"} for task in older.to_json()]
    saved[1]["gain"] = 0.0
    assert restored.load_json(saved)
    assert restored.tasks[1].gain is None and restored.tasks[1].nest_drop is None


def test_a_known_tasks_first_batch_that_all_failed_says_nothing_of_nests():
    allocator = TaskAllocator([1.0, 1.0], [1e6, 1e6], AllocatorConfig())
    allocator.know_latency(1, 1e-3)
    allocator.update(0, 2, 1e-3)
    allocator.update(1, 2, float("inf"))  # every candidate failed
    assert allocator.tasks[1].nest_drop is None and allocator.tasks[1].best_s == 1e-3
    assert allocator.expected_nest_drop() == AllocatorConfig().nest_drop_prior


def test_tasks_an_earlier_loop_measured_let_the_unmeasured_ones_go_first():
    """A new graph's loop (or a resume without the allocator's checkpoint): the large tasks the
    first graph shared come with trials, and the small new one is visited before them."""
    allocator = TaskAllocator([1.0] * 3, [1e9, 1e8, 1e6], AllocatorConfig(), seed=0)
    allocator.know_trials(0, 6, 2e-3)
    allocator.know_trials(1, 4, float("inf"))  # every earlier trial failed: visited all the same
    allocator.know_trials(2, 0, float("inf"))  # nothing measured: still owed its first visit
    assert allocator.select() == 2
    assert allocator.tasks[0].trials == 6 and allocator.tasks[0].best_s == 2e-3


def test_trials_an_allocator_already_counts_are_not_counted_again():
    allocator = TaskAllocator([1.0] * 2, [1e6] * 2, AllocatorConfig(), seed=0)
    allocator.update(0, trials=4, best_s=3e-3)  # as a restored checkpoint holds it
    allocator.know_trials(0, 4, 3e-3)
    assert (allocator.tasks[0].trials, allocator.tasks[0].batches) == (4, 1)
