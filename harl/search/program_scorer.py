"""The cost model as the search sees it: scores, pooled features, held-out trust."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from harl.agents.model_trust import ModelTrust, rank_correlation
from harl.agents.tile_tuner import Evaluation
from harl.interrupt import check_interrupt
from harl.report.metrics import MetricsLogger
from harl.resume import FAILED_RUN_SECS
from harl.search.cost_prior import CostPrior
from harl.tvm_adapter import xgb_predict, xgb_train, xgb_trainer


def pooled(features: np.ndarray) -> np.ndarray:
    """Per-store program features pooled to a fixed size (mean and max over stores)."""
    if features.size == 0:
        return np.zeros(2 * features.shape[-1], dtype=np.float32)
    return np.concatenate([features.mean(0), features.max(0)]).astype(np.float32)


@dataclass(frozen=True)
class Standardiser:
    """Mean and spread of some scores, to put others on their scale."""

    mean: float
    spread: float

    @classmethod
    def of(cls, values, flat_spread: float = np.inf) -> Standardiser:
        """`flat_spread` stands in for a zero spread (inf: a model that scores every measured
        candidate alike cannot tell candidates apart, so its standardised scores are 0)."""
        values = np.asarray(values, dtype=float)
        spread = float(values.std())
        return cls(float(values.mean()), spread if spread > 0 else flat_spread)

    def apply(self, values) -> np.ndarray:
        return (np.asarray(values, dtype=float) - self.mean) / self.spread


EQUAL_WEIGHT_SAMPLES = 48
"""successful measurements of a task after which the run's model weighs as much as the prior"""
MIN_TASK_SAMPLES = 4
"""successful measurements of a task before the run's model takes part next to the prior"""


def own_weight_after(samples: int, equal_weight_samples: int = EQUAL_WEIGHT_SAMPLES,
                     min_task_samples: int = MIN_TASK_SAMPLES) -> float:
    """The run's model's weight next to the prior after `samples` successful measurements of a
    task: 0 below `min_task_samples`, one half at `equal_weight_samples`."""
    if samples < min_task_samples:
        return 0.0
    return samples / (samples + equal_weight_samples)


def blend(own_weight: float, own_scores, prior_scores, own: Standardiser,
          prior: Standardiser) -> np.ndarray:
    """The run's model's and the prior's scores, each standardised on the task's measured
    candidates, weighted `own_weight` and the rest."""
    return own_weight * own.apply(own_scores) + (1.0 - own_weight) * prior.apply(prior_scores)


class ProgramScorer:
    """Scores schedules with an XGBoost model and returns their pooled features too.

    `xgb` is the run's XGBModel (TVM's, Python side), shared by the tasks. Where `prior` (a
    model trained offline on other workloads, see harl.search.cost_prior) applies to a task, it
    scores the task's candidates alone until the run's model has trained on `min_task_samples`
    successful measurements of the task, then together with the run's model: each model's scores
    standardised on those measurements, weighted n / (n + `equal_weight_samples`) for the run's
    model after n of them and the rest for the prior, and put back on the scale of the task's
    measured throughputs (best latency / latency), which the tile tuner's rewards assume.
    Replayed on earlier runs (tools/replay_scorers.py), the run's model ranked the next
    candidates of a task of 1 MFLOP or more far worse than the prior up to 48 measurements (rho
    0.15-0.29 against 0.40-0.51), and the blend about as well as the prior, a little better at
    48; on tasks of 0.1-1 MFLOP the prior leads up to 8 measurements, and the run's model after
    16, which the blend follows as its weight grows. Without a model that ranks,
    scores are random and `ranks` is False, so the policy does not learn from them. Call
    `note_update` after each update of `xgb`.
    """

    def __init__(self, xgb=None, prior: CostPrior | None = None,
                 *, equal_weight_samples: int = EQUAL_WEIGHT_SAMPLES,
                 min_task_samples: int = MIN_TASK_SAMPLES,
                 metrics: MetricsLogger | None = None) -> None:
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        self.metrics = metrics if metrics is not None else MetricsLogger()
        self.xgb = xgb
        self.prior = prior
        self.equal_weight_samples = equal_weight_samples
        self.min_task_samples = min_task_samples
        self.extractor = xgb.extractor if xgb is not None else PerStoreFeature()
        self.rng = np.random.default_rng(0)
        self.trained_on: dict[str, int] = {}  # workload hash -> successful measurements
        self._reference: dict[str, tuple] = {}  # workload hash -> (data version, standardisers)
        self.note_update()

    def note_update(self) -> None:
        """After an update of the run's model: if it retrained (TVM's XGBModel retrains only once
        its data grew by a fifth), remember what each workload contributed."""
        xgb = self.xgb
        if xgb is not None and xgb.booster is not None and xgb.last_train_size == xgb.data_size:
            self.trained_on = {key: int((group.costs < FAILED_RUN_SECS).sum())
                               for key, group in xgb.data.items()}

    @property
    def informative(self) -> bool:
        """Whether the run's own model has learned (from any task)."""
        return (self.xgb is not None and self.xgb.booster is not None
                and self.xgb.data_size >= self.xgb.num_warmup_samples)

    def ranks(self, mod) -> bool:
        """Whether the scores of `mod`'s candidates mean anything: the run's model has learned,
        or the prior scores them."""
        return self.informative or self.uses_prior(mod)

    def samples_of(self, mod) -> int:
        """Successful measurements of workload `mod` the run's model has trained on."""
        from tvm.s_tir.meta_schedule.utils import shash2hex

        return self.trained_on.get(shash2hex(mod), 0)

    def uses_prior(self, mod) -> bool:
        """Whether the prior takes part in scoring `mod`'s candidates (it applies to the task)."""
        return self.prior is not None and self.prior.applies_to(mod)

    def own_weight(self, mod) -> float:
        """The run's model's weight in the scores of `mod`'s candidates: 0 until it has learned
        (and, with the prior, trained on `min_task_samples` of the task), 1 without the prior."""
        if not self.informative:
            return 0.0
        if not self.uses_prior(mod):
            return 1.0
        return own_weight_after(self.samples_of(mod), self.equal_weight_samples,
                                self.min_task_samples)

    def __call__(self, context, candidates: list[MeasureCandidate]) -> Evaluation:
        check_interrupt()  # called hundreds of times per batch: Ctrl-C need not wait for it
        by_prior, weight = self.uses_prior(context.mod), self.own_weight(context.mod)
        if not (by_prior or weight):  # no features needed for a guess
            return Evaluation(self.rng.uniform(size=len(candidates)))
        with self.metrics.stage_timing("search/feature_seconds"):
            raw = [x.numpy().astype("float32")
                   for x in self.extractor.extract_from(context, candidates)]
            features = np.stack([pooled(x) for x in raw])
        with self.metrics.stage_timing("search/prediction_seconds"):
            scores = self._predict(context.mod, raw, by_prior, weight)
        return Evaluation(scores, features)

    def _predict(self, mod, raw: list[np.ndarray], by_prior: bool, weight: float) -> np.ndarray:
        """Scores from the models that take part (see the class docstring)."""
        if not by_prior or weight == 0.0:
            model = self.xgb if weight else self.prior.xgb
            return np.asarray(xgb_predict(model, raw), dtype=float)
        own, prior, measured = self._standardisers(mod)
        scores = blend(weight, xgb_predict(self.xgb, raw), xgb_predict(self.prior.xgb, raw), own,
                       prior)
        return measured.mean + measured.spread * scores

    def _standardisers(self, mod) -> tuple[Standardiser, Standardiser, Standardiser]:
        """The run's model's and the prior's scores on the task's successful measurements, and
        the measured throughputs themselves: the first two put the models on one scale, the
        last puts their blend back on the scale of throughputs."""
        from tvm.s_tir.meta_schedule.utils import shash2hex

        key = shash2hex(mod)
        group = self.xgb.data[key]  # trained on the task, so it has measured data
        version = (len(group.features), self.xgb.last_train_size)
        if self._reference.get(key, (None,))[0] != version:
            ok = np.flatnonzero(group.costs < FAILED_RUN_SECS)
            measured = [group.features[i] for i in ok]
            self._reference[key] = (version, (
                Standardiser.of(xgb_predict(self.xgb, measured)),
                Standardiser.of(xgb_predict(self.prior.xgb, measured)),
                Standardiser.of(group.min_cost / group.costs[ok], flat_spread=1.0)))
        return self._reference[key][1]

    def holdout_trust(self, mod, folds: int = 3, min_samples: int = 8) -> float | None:
        """How well the model ranks `mod`'s measured candidates it has not trained on.

        k-fold over the workload's measurements (every other workload's stay in training):
        the rank correlation of the held-out predictions with the measured throughputs, clipped
        at 0. None with fewer than `min_samples` measurements. It judges the model on a task
        before any of its predictions could be checked against a measurement.
        """
        from tvm.s_tir.meta_schedule.utils import shash2hex

        group = self.xgb.data.get(shash2hex(mod)) if self.xgb is not None else None
        if group is None or len(group.features) < min_samples:
            return None
        others = [g for g in self.xgb.data.values() if g is not group]
        base_xs = [x for g in others for x in g.features]
        base_ys = [g.min_cost / g.costs for g in others]
        scratch = xgb_trainer(
            extractor=self.extractor, config=self.xgb.config, num_warmup_samples=0,
            early_stopping_rounds=self.xgb.early_stopping_rounds, verbose_eval=10**9,
            average_peak_n=self.xgb.average_peak_n)
        order = self.rng.permutation(len(group.features))
        predicted = np.zeros(len(order))
        for fold in range(folds):
            test, train = order[fold::folds], np.setdiff1d(order, order[fold::folds])
            costs = group.costs[train]
            xgb_train(scratch, base_xs + [group.features[i] for i in train],
                      np.concatenate([*base_ys, costs.min() / costs]))
            predicted[test] = xgb_predict(scratch, [group.features[i] for i in test])
        # A failed run's cost is 1e10 s: its throughput ranks last, as in ModelTrust.
        return max(0.0, rank_correlation(predicted, 1.0 / group.costs))


def batch_trust(scorer, mod, trust: ModelTrust, *, borrowed: Callable[[], float | None]) -> float:
    """How far `scorer` (a ProgramScorer) is trusted for the next batch of the task `mod`
    (`trust`: its predictions judged against its measurements; `borrowed`: the other tasks').

    Where the cost prior takes part, the prior's trust on workloads held out of its
    training, or more once the task's measurements judge the scores higher: judged in-run,
    a model is seen only on the candidates it screened to the top, a narrow range on which
    its rank correlation reads low (the prior's on the conv2d's first batches: 0.23, against
    0.41 on MetaSchedule's unscreened ones). Without the prior, the run's model's own trust
    once enough of its predictions were measured; before, it is judged on the task's
    held-out measurements, and with too few of them it borrows the other tasks' trust (see
    TrustBoard). 0 while no model can rank.
    """
    if not scorer.ranks(mod):
        return trust.value
    if scorer.uses_prior(mod):
        return max(scorer.prior.trust, trust.value)
    if trust.judged:
        return trust.value
    held_out = scorer.holdout_trust(mod)
    if held_out is not None:
        return held_out
    prior = borrowed()
    return 0.0 if prior is None else prior
