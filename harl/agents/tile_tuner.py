"""Low level: act on a sketch's sampling decisions, guided by a cost model and a learned policy.

A state is the tuple of a trace's tunable decisions: the factors of each SamplePerfectTile (their
product is the loop extent, the innermost bounded by the instruction's limit), the index of each
SampleCategorical (unroll depth), the loop of each SampleComputeLocation and the parallel extent
the sketch annotates. An action changes one decision and keeps the state legal: a prime factor
moves between two levels of a tile, or a choice site takes another of its known options.

Trajectories start from the best measured states and from fresh samples. At each step some moves
are proposed, a surrogate on the decisions alone (`decision_surrogate`) keeps its best few, the
cost model scores the states they lead to, and the actor-critic (`tile_policy.TilePolicy`) picks
one. Rewards are the predicted improvements, corrected by
measurements after the batch has run; PPO then updates the policy. Exploration adapts as the task
converges: while measurements keep improving, epsilon, trajectory length and the share of fresh
samples shrink (exploit); when they stall, they grow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from harl.agents.decision_surrogate import DecisionSurrogate, SurrogateConfig
from harl.agents.tile_policy import (
    FEATURE_DIM,
    SITE_KINDS,
    Step,
    TilePolicy,
    TilePolicyConfig,
    move_inputs,
    state_inputs,
)

Decision = tuple[int, ...] | int
State = tuple[Decision, ...]
CHOICE_KINDS = ("compute_location", "parallel")


@dataclass(frozen=True)
class Site:
    """One tunable decision of a trace."""

    kind: str  # one of SITE_KINDS
    size: int  # tile levels, or number of categories (choice sites: 0, options kept aside)
    max_innermost: int = 0  # tile only: bound on the innermost factor (0: none)


TILE_METHODS = ("ppo", "prior-only", "random-moves", "evolutionary")
"""how a trajectory picks its next move: the PPO actor-critic; the cost model's prior alone (no
learning); uniformly at random; or no tile tuner at all, MetaSchedule's evolutionary search per
task (harl's plan builds that one: `harl.search.harl`)"""


@dataclass(frozen=True)
class TileTunerConfig:
    """Hyperparameters of the tile tuner."""

    method: str = "prior-only"
    """ppo | prior-only | random-moves | evolutionary: the policy that picks each trajectory's
    moves is trained with PPO, or stays the cost model's prior (never trained), or picks
    uniformly among the legal scored moves; `evolutionary` replaces the sketch chooser and tile
    tuner by MetaSchedule's evolutionary search inside harl's loop (ablation arms). prior-only
    by default: PPO gets 1-21 updates a run, its critic explains none of the return's variance
    and its clip fraction stays 0, and trained it was no faster on the development models nor
    on the held-out ones (docs/benchmarks.md, ablation arms)"""
    adaptive: bool = True
    """adapt exploration (epsilon, the fresh share, trajectory length) to whether the task's
    batches improve; off: they keep their initial values (an ablation arm)"""
    proposals_per_step: int = 8
    """moves proposed and scored by the cost model at each step of a trajectory while the
    surrogate does not screen (see `SurrogateConfig` for when it does)"""
    trajectory_length: int = 6
    """steps per trajectory when the task is neither improving nor stalled"""
    epsilon: float = 0.15
    """initial probability of a uniformly random move instead of the policy's"""
    epsilon_range: tuple[float, float] = (0.05, 0.5)
    """bounds within which epsilon and the fresh share adapt"""
    fresh_share: float = 0.25
    """initial share of a batch measured from fresh random samples"""
    stall_batches: int = 2
    """batches without improvement after which exploration grows"""
    policy: TilePolicyConfig = field(default_factory=TilePolicyConfig)
    surrogate: SurrogateConfig = field(default_factory=SurrogateConfig)
    """screens each step's proposals before the cost model scores them"""

    def __post_init__(self) -> None:
        if self.method not in TILE_METHODS:
            raise ValueError(f"tile.method must be one of {', '.join(TILE_METHODS)}, "
                             f"not {self.method!r}")


@dataclass
class Evaluation:
    """What the cost model says of some states: scores (higher is better) and pooled features."""

    scores: np.ndarray
    features: np.ndarray | None = None  # (n, FEATURE_DIM), None where unavailable


Evaluator = Callable[[list[State]], "Evaluation | np.ndarray"]


@dataclass
class SearchResult:
    """What one round of trajectories found."""

    visited: dict[State, float]
    """every state scored, with its score"""
    bests: list[State]
    """the best-scored state of each trajectory, best first: one candidate per start keeps a
    batch diverse where the top of `visited` would crowd around one start"""


def _prime_factors(n: int) -> list[int]:
    factors, d = [], 2
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1
    if n > 1:
        factors.append(n)
    return factors


def is_legal(site: Site, decision: Decision, extent: int | None = None,
             options: Sequence[int] = ()) -> bool:
    """A tile keeps its product (when known) and innermost bound; a choice is a known option."""
    if site.kind == "categorical":
        return isinstance(decision, int) and 0 <= decision < site.size
    if site.kind in CHOICE_KINDS:
        return decision in options
    factors = tuple(decision)
    if len(factors) != site.size or any(f < 1 for f in factors):
        return False
    if extent is not None and int(np.prod(factors)) != extent:
        return False
    return not (site.max_innermost > 0 and factors[-1] > site.max_innermost)


def propose(site: Site, decision: Decision, rng: np.random.Generator,
            options: Sequence[int] = ()) -> Decision | None:
    """A random legal neighbour of `decision`, or None if the site has none."""
    if site.kind == "categorical":
        if site.size < 2:
            return None
        choice = int(rng.integers(site.size - 1))
        return choice if choice < decision else choice + 1
    if site.kind in CHOICE_KINDS:
        others = [o for o in options if o != decision]
        return int(rng.choice(others)) if others else None
    factors = list(decision)
    sources = [i for i, f in enumerate(factors) if f > 1]
    if not sources or len(factors) < 2:
        return None
    for _ in range(8):
        src = int(rng.choice(sources))
        dst = int(rng.choice([i for i in range(len(factors)) if i != src]))
        prime = int(rng.choice(_prime_factors(factors[src])))
        moved = factors.copy()
        moved[src] //= prime
        moved[dst] *= prime
        if is_legal(site, tuple(moved)):
            return tuple(moved)
    return None


def _evaluate(evaluator: Evaluator, states: list[State]) -> Evaluation:
    result = evaluator(states)
    if not isinstance(result, Evaluation):
        result = Evaluation(np.asarray(result, dtype=float))
    if result.features is None:
        result.features = np.zeros((len(states), FEATURE_DIM), dtype=np.float32)
    return result


@dataclass
class _Walk:
    """One trajectory in progress: where it is, its best state, and its steps so far."""

    current: State
    score: float
    features: np.ndarray
    active: bool = True
    best: tuple[float, State] = field(init=False)
    steps: list[tuple[Step, State, float]] = field(default_factory=list)  # + state and score

    def __post_init__(self) -> None:
        self.best = (self.score, self.current)


class TileTuner:
    """Policy-guided trajectories over one sketch's decisions, with adaptive exploration."""

    def __init__(self, sites: Sequence[Site], config: TileTunerConfig, *, seed: int = 0,
                 policy: TilePolicy | None = None,
                 options: Sequence[Sequence[int]] | None = None) -> None:
        self.sites = list(sites)
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.policy = policy if policy is not None else TilePolicy(config.policy, seed)
        self.options = [list(o) for o in options] if options else [[] for _ in self.sites]
        self.epsilon = config.epsilon
        self.fresh_share = config.fresh_share
        self.trajectory_length = config.trajectory_length
        self.best_measured = np.inf
        self.stalled_batches = 0
        self.steps: list[Step] = []
        self.step_of: dict[State, int] = {}  # state reached -> index of the step reaching it
        self.predicted: dict[State, float] = {}
        self.surrogate = DecisionSurrogate([site.kind for site in self.sites], config.surrogate,
                                           seed)

    def observe(self, states: Sequence[State], scores: Sequence[float]) -> None:
        """A pool of fresh samples the cost model scored: the surrogate is judged on them, then
        learns from them."""
        self.surrogate.judge(states, scores)
        self.surrogate.observe(states, scores)

    def add_options(self, site_index: int, values: Sequence[int]) -> None:
        """Options of a choice site seen in fresh samples (legal by construction)."""
        known = self.options[site_index]
        known.extend(v for v in values if v not in known)

    def neighbour(self, state: State) -> tuple[int, State] | None:
        """A legal move on a uniformly chosen site."""
        if not self.sites:
            return None
        for _ in range(4):
            site_index = int(self.rng.integers(len(self.sites)))
            moved = propose(self.sites[site_index], state[site_index], self.rng,
                            self.options[site_index])
            if moved is not None:
                new_state = list(state)
                new_state[site_index] = moved
                return site_index, tuple(new_state)
        return None

    def _proposals(self, state: State, count: int) -> dict[State, int]:
        """Up to `count` distinct neighbours of `state`, each with the site its move changed."""
        proposals: dict[State, int] = {}
        for _ in range(count):
            move = self.neighbour(state)
            if move is not None:
                site_index, new_state = move
                proposals[new_state] = site_index
        return proposals

    def search(self, starts: Sequence[State], evaluator: Evaluator,
               learn: bool = True) -> SearchResult:
        """One trajectory from each start: every visited state with its score, and each
        trajectory's best.

        The trajectories step together: each step's proposals of all of them are scored in one
        call, which keeps the threads that replay them busy. With `learn`, the steps are kept
        as the policy's rollout, one trajectory after another (the scores must mean something:
        not while the cost model is still guessing).
        """
        visited: dict[State, float] = {}
        if not starts:
            return SearchResult(visited, [])
        first = _evaluate(evaluator, list(starts))
        visited.update(zip(starts, map(float, first.scores), strict=True))
        if learn:
            self.surrogate.observe(starts, first.scores)
        screening = learn and self.surrogate.fit() and self.surrogate.trusted
        count = (self.config.surrogate.proposed if screening
                 else self.config.proposals_per_step)
        walks = [_Walk(state, float(first.scores[k]), first.features[k])
                 for k, state in enumerate(starts)]
        for t in range(self.trajectory_length):
            moving = []
            for walk in (w for w in walks if w.active):
                moves = list(self._proposals(walk.current, count).items())
                walk.active = bool(moves)
                if moves:
                    moving.append((walk, moves))
            if not moving:
                break
            predicted = None
            if screening:
                moving, predicted = self._screened(moving)
            proposed = [s for _, moves in moving for s, _ in moves]
            found = _evaluate(evaluator, proposed)
            visited.update(zip(proposed, map(float, found.scores), strict=True))
            if learn:
                self.surrogate.observe(proposed, found.scores)
            if predicted is not None:
                self.surrogate.check(predicted, found.scores)
            offset = 0
            for walk, moves in moving:
                span = slice(offset, offset + len(moves))
                offset += len(moves)
                self._step(walk, moves, found.scores[span], found.features[span],
                           t / self.trajectory_length)
        bests = sorted((walk.best for walk in walks if np.isfinite(walk.best[0])),
                       key=lambda pair: -pair[0])
        if learn:
            for walk in walks:
                for step, state, score in walk.steps:
                    self.steps.append(step)
                    self.step_of[state] = len(self.steps) - 1
                    self.predicted[state] = score
                if walk.steps:
                    self.steps[-1].last = True
        return SearchResult(visited, list(dict.fromkeys(state for _, state in bests)))

    def _screened(self, moving: list) -> tuple[list, np.ndarray]:
        """Each walk's proposals cut to the surrogate's best `keep`; with probability epsilon
        the last of them is swapped for a random other, so exploration still reaches moves the
        surrogate undervalues. Returns the kept moves and their predicted scores."""
        keep = self.config.surrogate.keep
        predicted = self.surrogate.predict([s for _, moves in moving for s, _ in moves])
        kept, kept_predicted, offset = [], [], 0
        for walk, moves in moving:
            scores = predicted[offset: offset + len(moves)]
            offset += len(moves)
            order = list(np.argsort(-scores, kind="stable"))
            chosen = order[:keep]
            if len(order) > keep and self.rng.random() < self.epsilon:
                chosen[-1] = order[keep + int(self.rng.integers(len(order) - keep))]
            kept.append((walk, [moves[i] for i in chosen]))
            kept_predicted.extend(scores[chosen])
        return kept, np.asarray(kept_predicted)

    def _step(self, walk: _Walk, moves: list[tuple[State, int]], scores: np.ndarray,
              features: np.ndarray, progress: float) -> None:
        """The policy moves `walk` to one of its scored proposals (it stops if none is legal)."""
        alive = np.isfinite(scores)
        if not alive.any():
            walk.active = False
            return
        moves = [m for m, ok in zip(moves, alive, strict=True) if ok]
        next_scores, next_features = scores[alive], features[alive]
        changes = next_scores - walk.score
        inputs = np.stack([
            move_inputs(f, SITE_KINDS.index(self.sites[i].kind), c, progress)
            for (_, i), f, c in zip(moves, next_features, changes, strict=True)])
        state_in = state_inputs(walk.features, progress)
        epsilon = 1.0 if self.config.method == "random-moves" else self.epsilon
        action, logprob, value = self.policy.act(inputs, changes, state_in, epsilon)
        walk.current, walk.score = moves[action][0], float(next_scores[action])
        walk.features = next_features[action]
        walk.best = max(walk.best, (walk.score, walk.current), key=lambda pair: pair[0])
        walk.steps.append((Step(inputs, changes.astype(np.float32), action, logprob, state_in,
                                value, float(changes[action]), last=False), walk.current,
                           walk.score))

    def correct(self, measured_quality: dict[State, float]) -> None:
        """Add (measured - predicted) quality to the steps that reached measured states."""
        for state, quality in measured_quality.items():
            index = self.step_of.get(state)
            if index is not None:
                self.steps[index].reward += quality - self.predicted[state]

    def learn(self) -> dict[str, float]:
        """PPO update on the kept steps, which are then dropped (only dropped where the
        policy is not trained: `TileTunerConfig.method` other than ppo)."""
        trains = self.config.method == "ppo" and self.steps
        losses = self.policy.update(self.steps, self.epsilon) if trains else {}
        losses.update(self.surrogate.take_metrics())
        self.steps, self.step_of, self.predicted = [], {}, {}
        return losses

    def observe_batch(self, best_latency_s: float) -> None:
        """Adapt exploration to whether the last measured batch improved the task (with
        `TileTunerConfig.adaptive`; else only the best is kept)."""
        low, high = self.config.epsilon_range
        if best_latency_s < self.best_measured * (1 - 1e-3):
            self.best_measured = best_latency_s
            self.stalled_batches = 0
            if not self.config.adaptive:
                return
            self.epsilon = max(low, self.epsilon * 0.8)
            self.fresh_share = max(low, self.fresh_share * 0.8)
            self.trajectory_length = max(2, self.trajectory_length - 1)
        else:
            self.stalled_batches += 1
            if self.config.adaptive and self.stalled_batches >= self.config.stall_batches:
                self.epsilon = min(high, self.epsilon * 1.5)
                self.fresh_share = min(high, self.fresh_share * 1.5)
                self.trajectory_length = min(3 * self.config.trajectory_length,
                                             self.trajectory_length + 2)
