"""The cost model's trust: rank correlation of its scores with what was measured."""

import math

import numpy as np
import pytest

from harl.agents.model_trust import ModelTrust, TrustBoard, rank_correlation


def test_rank_correlation_matches_spearman_with_ties():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 5, 12).astype(float)  # ties on purpose
        y = x + rng.normal(0, 2, 12)
        assert math.isclose(rank_correlation(x, y), scipy_stats.spearmanr(x, y).statistic,
                            abs_tol=1e-9)
    assert rank_correlation(np.ones(5), np.arange(5.0)) == 0.0  # a constant model says nothing


def test_trust_follows_how_well_scores_rank_measured_latencies():
    latencies = np.linspace(1e-3, 5e-3, 12)
    good, reversed_, untrained = ModelTrust(24), ModelTrust(24), ModelTrust(24)
    for latency in latencies:
        good.add(1.0 / latency, latency)  # higher score, faster: a perfect ranking
        reversed_.add(latency, latency)  # prefers the slow ones
        untrained.add(0.5, latency)
    assert math.isclose(good.value, 1.0)
    assert reversed_.value == 0.0 and untrained.value == 0.0


def test_failures_count_as_the_slowest_and_few_pairs_earn_no_trust():
    trust = ModelTrust(24)
    for score, latency in [(0.9, 1e-3), (0.1, math.inf), (0.5, 2e-3)]:
        trust.add(score, latency)
    assert trust.value == 0.0  # fewer than 4 measured
    trust.add(0.3, 3e-3)
    assert math.isclose(trust.value, 1.0)


def test_window_forgets_old_pairs():
    trust = ModelTrust(window=4)
    for latency in [1e-3, 2e-3, 3e-3, 4e-3]:
        trust.add(latency, latency)  # wrong way round
    assert trust.value == 0.0
    for latency in [1e-3, 2e-3, 3e-3, 4e-3]:
        trust.add(1 / latency, latency)  # the model has learned
    assert math.isclose(trust.value, 1.0)


def test_an_unjudged_task_borrows_the_ranking_the_model_showed_on_the_others():
    board = TrustBoard(window=24, min_comparisons=6)
    assert board.prior(0) is None  # nothing measured yet
    tasks = [board.task(i) for i in range(4)]
    for trust in tasks[:3]:
        trust.add(0.9, 1e-3)  # two candidates of a task: one ordered pair
        trust.add(0.1, 2e-3)
    assert board.prior(3) is None  # 3 ordered pairs: too few
    for latency in (1e-3, 2e-3, 3e-3, 4e-3):
        tasks[3].add(1 / latency, latency)  # 6 more pairs, all ordered right
    assert math.isclose(board.prior(0), 1.0)  # 2 + 6 pairs of the other tasks, all right
    assert board.prior(3) is None  # a task's own pairs are not its prior
    reversed_task = board.task(4)
    for latency in (1e-3, 2e-3, 3e-3, 4e-3, 5e-3):
        reversed_task.add(latency, latency)  # 10 pairs, all the wrong way round
    assert board.prior(0) == 0.0  # 8 right against 10 wrong
    # Pairs across tasks are never compared: latencies of different tasks are not comparable.
    cross = TrustBoard(window=24, min_comparisons=1)
    cross.task(0).add(0.9, 5e-3)
    cross.task(1).add(0.1, 1e-3)
    assert cross.prior(2) is None
