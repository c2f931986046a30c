"""The tile tuner on a synthetic tile landscape: legal moves, and better than random sampling."""

import math

import numpy as np

from harl.agents.decision_surrogate import DecisionSurrogate, SurrogateConfig
from harl.agents.model_trust import rank_correlation
from harl.agents.tile_tuner import Site, TileTuner, TileTunerConfig, is_legal, propose

SITES = [Site("tile", 4, 16), Site("tile", 4, 16), Site("categorical", 4)]
EXTENTS = [256, 512, None]
OPTIMUM = ((4, 8, 2, 4), (8, 4, 1, 16), 2)


def random_state(rng):
    state = []
    for site, extent in zip(SITES, EXTENTS, strict=True):
        if site.kind == "categorical":
            state.append(int(rng.integers(site.size)))
            continue
        while True:  # rejection-sample a legal factorisation
            factors = [1] * site.size
            for prime in [2] * int(math.log2(extent)):
                factors[int(rng.integers(site.size))] *= prime
            if is_legal(site, tuple(factors), extent):
                state.append(tuple(factors))
                break
    return tuple(state)


def landscape(state) -> float:
    """Higher is better; the unique maximum 0 is at OPTIMUM."""
    loss = 0.0
    for got, want in zip(state[:2], OPTIMUM[:2], strict=True):
        loss += sum((math.log2(g) - math.log2(w)) ** 2 for g, w in zip(got, want, strict=True))
    return -(loss + (state[2] != OPTIMUM[2]))


def test_every_proposed_move_is_legal():
    rng = np.random.default_rng(0)
    for _ in range(300):
        state = random_state(rng)
        for site, decision, extent in zip(SITES, state, EXTENTS, strict=True):
            moved = propose(site, decision, rng)
            if moved is not None:
                assert is_legal(site, moved, extent) and moved != decision


def evaluations_to_optimum(search, budget=6000):
    """Count landscape evaluations until OPTIMUM is among them (budget if never)."""
    count = 0
    seen = set()

    def score(states):
        nonlocal count
        out = []
        for state in states:
            if state not in seen:
                seen.add(state)
                count += 1
            out.append(landscape(state))
        return np.array(out)

    search(score)
    return count if OPTIMUM in seen else budget


def test_tuner_finds_the_optimum_in_fewer_evaluations_than_random():
    tuner_counts, random_counts = [], []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        tuner = TileTuner(SITES, TileTunerConfig(trajectory_length=60), seed=seed)

        def tuner_search(score, tuner=tuner, rng=rng):
            starts = [random_state(rng) for _ in range(4)]
            for _ in range(10):
                visited = tuner.search(starts, score).visited
                if OPTIMUM in visited:
                    return
                starts = sorted(visited, key=visited.get)[-4:]

        def random_search(score, rng=rng):
            for _ in range(60):
                batch = [random_state(rng) for _ in range(100)]
                score(batch)
                if OPTIMUM in batch:
                    return

        tuner_counts.append(evaluations_to_optimum(tuner_search))
        random_counts.append(evaluations_to_optimum(random_search))
    assert np.median(tuner_counts) < np.median(random_counts) / 2, (tuner_counts, random_counts)


def test_exploration_adapts_to_convergence():
    tuner = TileTuner(SITES, TileTunerConfig(epsilon=0.2, stall_batches=2))
    tuner.observe_batch(1.0)
    assert tuner.epsilon < 0.2
    exploiting = tuner.epsilon
    for _ in range(4):
        tuner.observe_batch(1.0)
    assert tuner.epsilon > exploiting and tuner.trajectory_length > 5


def test_trajectories_step_together_and_roll_out_one_after_another():
    tuner = TileTuner(SITES, TileTunerConfig(trajectory_length=5), seed=3)
    rng = np.random.default_rng(3)
    starts = [random_state(rng) for _ in range(3)]
    calls = []

    def score(states):
        calls.append(len(states))
        return np.array([landscape(s) for s in states])

    found = tuner.search(starts, score)
    # one call for the starts, then one per step for all trajectories' proposals
    assert len(calls) == 1 + 5 and calls[0] == 3 and min(calls[1:]) > 8
    assert len(found.bests) <= 3 and all(s in found.visited for s in found.bests)
    # the policy's rollout: each trajectory's 5 steps in a row, the last one marked
    assert len(tuner.steps) == 15
    assert [step.last for step in tuner.steps] == ([False] * 4 + [True]) * 3
    for state, index in tuner.step_of.items():
        assert tuner.predicted[state] == found.visited[state]
        assert 0 <= index < 15


def test_the_surrogate_ranks_unseen_states_and_puts_illegal_ones_below_legal_ones():
    rng = np.random.default_rng(0)
    surrogate = DecisionSurrogate([site.kind for site in SITES], SurrogateConfig(trees=32), 0)

    def scored(state):  # a large first factor of the first tile fails to replay: illegal
        return -np.inf if state[0][0] >= 16 else landscape(state)

    seen = [random_state(rng) for _ in range(300)]
    surrogate.observe(seen, [scored(s) for s in seen])
    assert surrogate.fit()
    unseen = [random_state(rng) for _ in range(300)]
    predicted = surrogate.predict(unseen)
    truth = np.array([scored(s) for s in unseen])
    legal = np.isfinite(truth)
    assert rank_correlation(predicted[legal], truth[legal]) > 0.8
    assert np.median(predicted[~legal]) < np.percentile(predicted[legal], 10)


def test_the_surrogate_keeps_one_row_per_state_with_its_latest_score():
    surrogate = DecisionSurrogate([site.kind for site in SITES], SurrogateConfig(window=3), 0)
    rng = np.random.default_rng(1)
    a, b, c, d = (random_state(rng) for _ in range(4))
    surrogate.observe([a, b, a], [1.0, 2.0, 3.0])
    surrogate.observe([c, b], [4.0, 5.0])
    assert {state: score for state, (_, score) in surrogate.rows.items()} == {a: 3.0, c: 4.0,
                                                                               b: 5.0}
    surrogate.observe([d], [-np.inf])  # the window holds the latest 3 distinct states
    assert list(surrogate.rows) == [c, b, d]


def test_screened_trajectories_score_fewer_states_and_climb_as_far():
    """Once the surrogate ranks a pool of scored samples well, each step scores its best few
    proposals instead of all of them; the trajectories end about as high."""
    results = {}
    for keep in (0, SurrogateConfig().keep):
        rng = np.random.default_rng(5)
        config = TileTunerConfig(trajectory_length=8, epsilon=0.05,
                                 surrogate=SurrogateConfig(keep=keep))
        tuner = TileTuner(SITES, config, seed=5)
        learned = [random_state(rng) for _ in range(64)]  # an earlier fill's pool
        tuner.observe(learned, [landscape(s) for s in learned])
        tuner.surrogate.fit()
        pool = [random_state(rng) for _ in range(64)]  # this fill's: judges it, then trains it
        tuner.observe(pool, [landscape(s) for s in pool])
        starts = sorted(pool, key=landscape)[-4:]
        calls = []

        def score(states, calls=calls):
            calls.append(len(states))
            return np.array([landscape(s) for s in states])

        found = tuner.search(starts, score)
        results[keep] = (sum(calls[1:]), max(found.visited.values()))
    (all_scored, all_best), (screened_scored, screened_best) = results.values()
    assert screened_scored < 0.7 * all_scored
    assert screened_best >= all_best - 1.0


def test_a_surrogate_that_ranks_a_fresh_pool_badly_does_not_screen():
    rng = np.random.default_rng(2)
    tuner = TileTuner(SITES, TileTunerConfig(), seed=2)
    learned = [random_state(rng) for _ in range(64)]
    tuner.observe(learned, [landscape(s) for s in learned])
    tuner.surrogate.fit()
    pool = [random_state(rng) for _ in range(64)]
    tuner.observe(pool, list(rng.permutation([landscape(s) for s in pool])))  # unrelated scores
    assert not tuner.surrogate.trusted
    calls = []

    def score(states):
        calls.append(len(states))
        return np.array([landscape(s) for s in states])

    tuner.search(sorted(pool, key=landscape)[-4:], score)
    assert max(calls[1:]) > 4 * tuner.config.surrogate.keep  # every walk's 8 proposals scored
