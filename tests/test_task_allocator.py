"""The task allocator on a synthetic two-task landscape with known headroom."""

import numpy as np

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
        assert visits[0] > 0.6 * sum(visits), visits
        assert min(visits) >= 1  # every task visited
        _, round_robin_total = run(None, seed=seed)
        assert total < round_robin_total


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
