"""The sketch chooser: no sketch starved, the best sketch favoured."""

import math

import numpy as np

from harl.agents.sketch_chooser import SketchChooser, SketchConfig


def test_every_sketch_is_tried_before_any_is_judged():
    chooser = SketchChooser(3, SketchConfig(min_trials=2))
    counts = chooser.allocate(6)
    assert list(counts) == [2, 2, 2]
    counts = SketchChooser(3, SketchConfig(min_trials=2)).allocate(4)
    assert counts.sum() == 4 and (counts >= 1).sum() >= 2


def test_the_fastest_sketch_gets_most_slots():
    chooser = SketchChooser(3, SketchConfig(min_trials=1), seed=1)
    for sketch, latency in [(0, 1.0), (1, 3.0), (2, math.inf)] * 4:
        chooser.update(sketch, latency)
    counts = np.sum([chooser.allocate(10) for _ in range(200)], axis=0)
    assert counts[0] > counts[1] > counts[2]
    assert chooser.failures[2] == 4


def test_a_judged_batch_goes_to_few_sketches_in_lots():
    chooser = SketchChooser(6, SketchConfig(min_trials=1, slots_per_pick=4), seed=2)
    for sketch in range(6):
        chooser.update(sketch, 1.0)
    for n in (1, 3, 4):
        counts = chooser.allocate(n)
        assert counts.sum() == n and (counts > 0).sum() == 1
    counts = chooser.allocate(10)  # lots of 4, 4 and 2
    assert counts.sum() == 10 and (counts > 0).sum() <= 3
    assert set(counts[counts > 0]) <= {2, 4, 6, 8, 10}
