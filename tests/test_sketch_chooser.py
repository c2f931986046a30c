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


def slots(chooser, n=8, draws=300):
    return np.sum([chooser.allocate(n) for _ in range(draws)], axis=0)


def two_poor_samples():
    """Sketch 0 measured often, best 1.0; sketch 1 measured twice, at best 1.4 (quality 0.71)."""
    chooser = SketchChooser(2, SketchConfig(min_trials=2), seed=3)
    for _ in range(10):
        chooser.update(0, 1.0)
    for latency in (1.4, 2.0):
        chooser.update(1, latency)
    return chooser


def test_a_sketch_the_trusted_model_rates_well_is_not_decided_by_two_poor_samples():
    measured_only = slots(two_poor_samples())
    predicted = two_poor_samples()
    predicted.predict(np.array([1.0, 1.1]), trust=0.8)
    rated_well = slots(predicted)
    assert rated_well[1] > 1.5 * measured_only[1]
    untrusted = two_poor_samples()
    untrusted.predict(np.array([1.0, 1.1]), trust=0.0)
    assert np.allclose(untrusted.values(), two_poor_samples().values())


def test_a_prediction_lifts_a_sketch_but_never_lowers_it():
    chooser = two_poor_samples()
    before = chooser.values()
    chooser.predict(np.array([0.2, np.nan]), trust=1.0)  # below the measured quality; unknown
    assert np.allclose(chooser.values(), before)
    chooser.predict(np.array([1.0, 0.9]), trust=0.5)
    lifted = chooser.values() - before
    assert lifted[0] == 0.0 and math.isclose(lifted[1], 0.5 * (0.9 - 1 / 1.4))
