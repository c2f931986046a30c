"""The sketch chooser and tile tuner plugged into MetaSchedule as a search strategy."""

from __future__ import annotations

import math
import time

import numpy as np
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy

from harl.agents.model_trust import TrustBoard
from harl.agents.sketch_chooser import SketchChooser
from harl.agents.tile_policy import TilePolicy
from harl.agents.tile_tuner import State, TileTuner
from harl.report.history import trial_latency_s
from harl.report.metrics import MetricsLogger
from harl.search.program_scorer import ProgramScorer, batch_trust
from harl.search.search_config import HarlSearchConfig, fresh_count
from harl.search.sibling_transfer import SiblingBoard, carried_sibling_state, signature_of
from harl.search.sketch_outlook import Probe, sketch_outlook
from harl.search.sketch_replay import SketchReplay
from harl.search.sketches import Sketch, sketch_traces
from harl.search.state_scores import Evaluate, measure_candidate, model_scores, random_scores
from harl.search.stored_elites import stored_elites
from harl.search.thread_bounds import ThreadBounds
from harl.search.trace_sites import initial_options, site_of, state_of, tunable_insts
from harl.search.transplant import carried_state


@derived_object
class HarlSearchStrategy(PySearchStrategy):
    """Each batch: the task's best state carried into sibling sketches (a few slots), then the
    chooser splits the rest across sketches and the tuner fills each sketch's share."""

    def __init__(self, config: HarlSearchConfig | None = None, *, seed: int = 0,
                 policy: TilePolicy | None = None, scorer: ProgramScorer | None = None,
                 metrics: MetricsLogger | None = None, task_id: int = -1,
                 trust_board: TrustBoard | None = None,
                 siblings: SiblingBoard | None = None) -> None:
        super().__init__()
        self.config = config or HarlSearchConfig()
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.policy = policy if policy is not None else TilePolicy(self.config.tile.policy, seed)
        self.scorer = scorer if scorer is not None else ProgramScorer()
        self.metrics = metrics if metrics is not None else MetricsLogger()
        self.task_id = task_id
        self.trust_board = (trust_board if trust_board is not None
                            else TrustBoard(self.config.trust_window))
        self.siblings = siblings if siblings is not None else SiblingBoard()

    def _initialize_with_tune_context(self, context) -> None:
        self.mod = context.mod
        self.postprocs = list(context.space_generator.postprocs)
        self.context = context
        workers = max(1, int(context.num_threads))  # threads that replay traces
        self.replay = SketchReplay(self.mod, self.postprocs, workers=workers, rng=self.rng,
                                   metrics=self.metrics)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database,
                   cost_model) -> None:
        self.max_trials, self.batch_size = int(max_trials), int(num_trials_per_iter)
        self.trials = 0
        self.best_s = math.inf
        self.measured: set[int] = set()
        self.pending: list[tuple[int, State, State]] = []  # sketch, requested, actual
        self.pending_scores: list[float] | None = None  # the cost model's, before measurement
        self.chosen_values, self.best_before = {}, math.inf  # the batch's: see _next_batch
        self.probes: dict[int, list[Probe]] = {}  # scored for the outlook, by sketch
        self.carried: set[tuple[int, State]] = set()  # (sketch, state) transplanted
        self.trust = self.trust_board.task(self.task_id)
        self.sketches = []
        for index, trace in enumerate(self._sketch_traces(design_spaces)):
            sites = [site_of(inst) for inst in tunable_insts(trace)]
            tuner = TileTuner(sites, self.config.tile, seed=self.seed * 1009 + index,
                              policy=self.policy, options=initial_options(trace))
            deterministic = not any(inst.kind.name.startswith("Sample") for inst in trace.insts)
            self.sketches.append(Sketch(trace, tuner, shortcut=self.replay.shortcut_of(trace),
                                        deterministic=deterministic,
                                        serial=index >= len(design_spaces),
                                        thread_bounds=ThreadBounds.of(trace)))
        self.signatures = [signature_of(sketch.tuner.sites, state_of(sketch.trace))
                           for sketch in self.sketches]
        self.chooser = SketchChooser(len(self.sketches), self.config.sketch, seed=self.seed)
        with self.metrics.timing("search/agent_seconds"):
            self._seed_elites(database)

    def _sketch_traces(self, design_spaces) -> list:
        return sketch_traces(self.mod, design_spaces, self.config.serial_max_flop)

    def _seed_elites(self, database) -> None:
        """On resume, each sketch's elites are the database's best records of this workload
        (see `stored_elites`), and none of them is measured again; the sketch chooser counts
        them as its trials, so that it goes on to the sketches the run has not tried yet."""
        limit = 4 * self.config.elites_per_sketch * len(self.sketches)
        stored = stored_elites(database, self.mod, [sketch.trace for sketch in self.sketches],
                               limit)
        for sketch_id, records in stored.items():  # one replay call per sketch: on the threads
            self.best_s = min([self.best_s, *(latency for latency, _ in records)])
            for latency, _ in records:
                self.chooser.update(sketch_id, latency)
            states = [state for _, state in records]
            for sch in self.replay.states(self.sketches[sketch_id], states):
                if sch is not None:  # measured already: not again
                    self.measured.add(tvm_ffi.structural_hash(sch.mod))
            self.sketches[sketch_id].elites = records[: self.config.elites_per_sketch]

    def post_tuning(self) -> None:
        self.pending, self.pending_scores = [], None

    def clone(self):
        return HarlSearchStrategy(self.config, seed=self.seed, policy=self.policy,
                                  scorer=self.scorer, metrics=self.metrics,
                                  task_id=self.task_id, trust_board=self.trust_board,
                                  siblings=self.siblings)

    # -- candidates -------------------------------------------------------------------------

    def _evaluator(self, sketch_id: int, cache: dict, known: list[Probe] = ()) -> Evaluate:
        """The cost model's scores of the sketch's states (see `model_scores`)."""
        return model_scores(
            schedules_of=lambda states: self.replay.states(self.sketches[sketch_id], states),
            score=lambda candidates: self.scorer(self.context, candidates), cache=cache,
            known=known)

    def _fill_sketch(self, sketch_id: int, count: int,
                     trust: float) -> list[tuple[int, State, object]]:
        """`count` new candidates of one sketch: fresh samples and refinements of its elites.

        Until the sketch has a measured elite, all are fresh samples. After, the share of fresh
        samples is 1 - the cost model's `trust`, within [the tuner's fresh share,
        `max_fresh_share`]; the rest are the best states of trajectories from the elites (and
        from the best-predicted fresh samples). Once a model ranks the task (the run's once it
        has learned, or the prior) it scores a pool of fresh samples, steers the trajectories,
        and with enough trust chooses which fresh samples are measured (a new task's first ones
        too); before, trajectories are random mutations.
        """
        sketch = self.sketches[sketch_id]
        learned = self.scorer.ranks(self.mod)
        n_fresh = fresh_count(count, has_elites=bool(sketch.elites), trust=trust,
                              tuner_share=sketch.tuner.fresh_share,
                              max_share=self.config.max_fresh_share)
        cache: dict[State, object] = {}
        fresh: list[State] = []
        pool = self.config.refine_pool if sketch.elites else self.config.fresh_pool
        drawn = max(pool, count) if learned else count
        if sketch.deterministic:
            drawn = 1
        probes = self.probes.pop(sketch_id, []) if learned else []  # scored for the outlook
        wanted = drawn - len(probes)
        drawn_here = (self.replay.fresh(sketch, wanted, wanted * self.config.bounded_draws)
                      if wanted > 0 else [])
        for state, sch in [(probe.state, probe.schedule) for probe in probes] + drawn_here:
            cache.setdefault(state, sch)
            fresh.append(state)
        fresh = list(dict.fromkeys(fresh))
        for site_index, site in enumerate(sketch.tuner.sites):
            if site.kind == "compute_location":
                sketch.tuner.add_options(site_index, [s[site_index] for s in fresh])
        guided: list[State] = []
        evaluate = (self._evaluator(sketch_id, cache, probes) if learned
                    else random_scores(self._evaluator(sketch_id, cache), self.rng))
        ranked = fresh
        if learned:
            scores = evaluate(fresh).scores
            sketch.tuner.observe(fresh, scores)
            ranked = [fresh[i] for i in np.argsort(-scores, kind="stable")]
        if sketch.elites:
            elites = [state for _, state in sketch.elites]
            found = sketch.tuner.search(
                list(dict.fromkeys(elites + ranked[: self.config.fresh_samples])), evaluate,
                learn=learned)
            others = sorted(found.visited, key=lambda s: -found.visited[s])
            guided = [s for s in dict.fromkeys(found.bests + others)
                      if found.visited[s] > -np.inf]
        if learned and trust >= self.config.screen_trust:
            fresh = ranked
        picks: list[tuple[int, State, object]] = []
        for state in fresh[:n_fresh] + guided + fresh[n_fresh:]:
            if len(picks) >= count:
                break
            pick = self._measurable(sketch_id, state, cache.get(state))
            if pick is not None:
                picks.append(pick)
        self.metrics.record(f"tile/fresh_picked_{sketch_id}", n_fresh / max(1, count))
        return picks

    def _measurable(self, sketch_id: int, state: State, sch) -> tuple[int, State, object] | None:
        """A pick of `sch` (the schedule of `state`, None where illegal) in its measured form,
        None where it is illegal or its program was measured before; a pick's program is
        marked measured."""
        if sch is None:
            return None
        key = tvm_ffi.structural_hash(sch.mod)
        if key in self.measured:
            return None
        sch = self.replay.as_measured(self.sketches[sketch_id], state, sch)
        if sch is None:
            return None
        self.measured.add(key)
        return sketch_id, state, sch  # requested state; TVM may re-sample some

    def _transplants(self, count: int) -> list[tuple[int, State, object]]:
        """Up to `count` picks of the task's best measured state carried into sibling sketches
        that draw the same decisions (see `harl.search.transplant`), each pair once, the least
        tried sketches first."""
        measured = [i for i, sketch in enumerate(self.sketches) if sketch.elites]
        if count <= 0 or not measured:
            return []
        source = min(measured, key=lambda i: self.sketches[i].elites[0][0])
        if not self.sketches[source].transplantable:
            return []  # the task's best is in a sketch whose state does not decide it
        state = self.sketches[source].elites[0][1]
        picks: list[tuple[int, State, object]] = []
        for target in np.argsort(self.chooser.trials, kind="stable"):
            sketch = self.sketches[target]
            if len(picks) >= count:
                break
            if target != source and sketch.transplantable:
                picks += self._carried(int(target), carried_state(
                    self.sketches[source].tuner.sites, state, sketch.tuner.sites,
                    sketch.tuner.options))
        return picks

    def _sibling_transfers(self, wanted: int) -> list[tuple[int, State, object]]:
        """Up to `sibling_share` of `wanted` (at least one while any is offered) picks of the
        other tasks' best states of sketches with this one's signature, each (sketch, state)
        once, the least tried sketches first (see `harl.search.sibling_transfer`)."""
        share = self.config.sibling_share
        count = max(1, round(wanted * share)) if share > 0 else 0
        picks: list[tuple[int, State, object]] = []
        for target in np.argsort(self.chooser.trials, kind="stable"):
            sketch = self.sketches[target]
            offers = (self.siblings.offers(self.task_id, self.signatures[target])
                      if sketch.transplantable else [])
            for offer in offers:
                if len(picks) >= count:
                    return picks
                picks += self._carried(int(target), carried_sibling_state(
                    offer, sketch.tuner.sites, sketch.tuner.options))
        return picks

    def _carried(self, target: int, carried: State | None) -> list[tuple[int, State, object]]:
        """[the pick of `carried` in sketch `target`], measured once per (sketch, state); [] where
        it does not fit, was carried before, or TVM changed a decision that did not fit."""
        if carried is None or (target, carried) in self.carried:
            return []
        self.carried.add((target, carried))
        sketch = self.sketches[target]
        pick = self._measurable(target, carried, self.replay.states(sketch, [carried])[0])
        return [pick] if pick is not None and state_of(pick[2].trace) == carried else []

    def generate_measure_candidates(self):
        remaining = self.max_trials - self.trials
        if remaining <= 0 or not self.sketches:
            return None
        with self.metrics.timing("search/agent_seconds"):
            return self._next_batch(min(self.batch_size, remaining))

    def _next_batch(self, wanted: int) -> list[MeasureCandidate] | None:
        """Up to `wanted` new candidates spread over the sketches; None when none is left."""
        trust = batch_trust(self.scorer, self.mod, self.trust,
                            borrowed=lambda: self.trust_board.prior(self.task_id))
        self.metrics.record("tile/batch_trust", trust)
        outlook = self._outlook(trust)
        for sketch_id in np.flatnonzero(np.isfinite(outlook)):
            self.metrics.record(f"sketch/outlook_{sketch_id}", float(outlook[sketch_id]))
        self.chooser.predict(outlook, trust)  # NaN: no prediction, the sketch is not lifted
        picks = self._sibling_transfers(wanted)
        self.metrics.record("sketch/sibling_transfers", len(picks))
        transplants = self._transplants(round(wanted * self.config.transplant_share))
        self.metrics.record("sketch/transplants", len(transplants))
        picks += transplants
        values = self.chooser.values()  # the chooser's value of each sketch given slots
        self.chosen_values, self.best_before = {}, self.best_s  # ... and the task's best
        for _ in range(self.config.fill_rounds):
            counts = self.chooser.allocate(wanted - len(picks))
            self.chosen_values.update((int(k), float(values[k])) for k in np.flatnonzero(counts))
            for sketch_id, count in enumerate(counts):
                if count > 0:
                    picks.extend(self._fill_sketch(sketch_id, int(count), trust))
            if len(picks) >= wanted:
                break
        if not picks:  # the task's space is spent (or its samples keep failing): it ends
            return None
        self.pending = [(sketch_id, state, state_of(sch.trace)) for sketch_id, state, sch in picks]
        shares = np.bincount([sketch_id for sketch_id, _, _ in picks],
                             minlength=len(self.sketches)) / len(picks)
        for sketch_id, share in enumerate(shares):
            self.metrics.record(f"sketch/share_{sketch_id}", float(share))
        candidates = [measure_candidate(sch) for _, _, sch in picks]
        # What the scores say of the batch, to judge them once measured (see ModelTrust), once
        # the run's model takes part (the prior alone was judged offline, on another scale).
        judged = self.scorer.own_weight(self.mod) > 0
        self.pending_scores = (list(self.scorer(self.context, candidates).scores)
                               if judged else None)
        return candidates

    def _outlook(self, trust: float) -> np.ndarray:
        """What the cost model predicts of each measured sketch, for the chooser (see
        `sketch_outlook`); NaN throughout while no model ranks the task, or before two sketches
        are measured. Its scored samples become `probes`, for the fills of this batch."""
        self.probes = {}
        measured = [i for i, sketch in enumerate(self.sketches) if sketch.elites]
        if (not self.scorer.ranks(self.mod) or trust <= 0.0 or len(measured) < 2
                or self.config.sketch.prediction_weight == 0.0
                or self.config.sketch.method == "uniform"):  # the outlook would go unused
            return np.full(len(self.sketches), np.nan)
        outlook, self.probes = sketch_outlook(
            self.sketches, measured, self.chooser.quality(), replay=self.replay,
            score=lambda schedules: self.scorer(self.context, list(map(measure_candidate,
                                                                       schedules))),
            is_measured=lambda sch: tvm_ffi.structural_hash(sch.mod) in self.measured,
            samples=self.config.outlook_samples)
        return outlook

    def notify_runner_results(self, measure_candidates, results) -> None:
        start = time.perf_counter()
        # The run's last batch may be cut to its trials left (harl.stoppable_search): a prefix.
        self.pending = self.pending[: len(results)]
        if self.pending_scores is not None:
            self.pending_scores = self.pending_scores[: len(results)]
        latencies = [trial_latency_s(None, result)[0] for result in results]
        self.best_s = min([self.best_s, *latencies])
        if self.pending_scores is not None:
            for score, latency in zip(self.pending_scores, latencies, strict=True):
                self.trust.add(score, latency)
            self.metrics.record("tile/model_trust", self.trust.value)
        measured: dict[int, dict[State, float]] = {}
        for (sketch_id, state, actual), latency in zip(self.pending, latencies, strict=True):
            self.chooser.update(sketch_id, latency)
            sketch = self.sketches[sketch_id]
            quality = self.best_s / latency if math.isfinite(latency) else 0.0
            measured.setdefault(sketch_id, {})[state] = quality
            if math.isfinite(latency):
                sketch.elites = sorted(sketch.elites + [(latency, actual)])[
                    : self.config.elites_per_sketch]
                if sketch.transplantable:
                    self.siblings.publish(self.task_id, self.signatures[sketch_id],
                                          sketch.tuner.sites, latency, actual)
        for sketch_id, qualities in measured.items():
            tuner = self.sketches[sketch_id].tuner
            best = min(lat for (s, _, _), lat in zip(self.pending, latencies, strict=True)
                       if s == sketch_id)
            if sketch_id in self.chosen_values and math.isfinite(self.best_before):
                # The chooser's value, and the task's best before the batch over the sketch's.
                self.metrics.record(f"sketch/value_{sketch_id}", self.chosen_values[sketch_id])
                self.metrics.record(f"sketch/realised_{sketch_id}", self.best_before / best)
            tuner.observe_batch(best)
            tuner.correct(qualities)
            for key, value in tuner.learn().items():
                self.metrics.record(f"tile/{key}", value)
            self.metrics.record(f"tile/epsilon_{sketch_id}", tuner.epsilon)
            self.metrics.record(f"tile/trajectory_length_{sketch_id}", tuner.trajectory_length)
            self.metrics.record(f"tile/fresh_share_{sketch_id}", tuner.fresh_share)
        self.metrics.record("sketch/best_ms", self.best_s * 1e3)
        if any(sketch.thread_bounds is not None for sketch in self.sketches):  # task's total
            self.metrics.record("search/out_of_thread_bounds", self.replay.out_of_bounds)
        self.metrics.add("search/agent_seconds", time.perf_counter() - start)
        self.trials += len(self.pending)
        self.metrics.dump(task_id=self.task_id, task_trials=self.trials)
        self.pending, self.pending_scores = [], None
