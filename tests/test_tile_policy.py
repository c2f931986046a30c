"""The tile tuner's actor-critic: PPO moves probability towards rewarded moves; safe checkpoints."""

import numpy as np
import pytest
import torch
from torch import nn

from harl.agents import checkpoint
from harl.agents.adam import Adam
from harl.agents.tile_policy import (
    FEATURE_DIM,
    SITE_KINDS,
    Step,
    TilePolicy,
    TilePolicyConfig,
    move_inputs,
    state_inputs,
)


def toy_moves(rng):
    """Three moves: one per kind of site; only the 'parallel' move is ever rewarded."""
    features = 0.1 * rng.normal(size=(3, FEATURE_DIM)).astype(np.float32)
    kinds = [SITE_KINDS.index(k) for k in ("tile", "categorical", "parallel")]
    return np.stack([move_inputs(f, k, 0.0, 0.0) for f, k in zip(features, kinds, strict=True)])


def parallel_probability(policy, rng, n=64):
    state = state_inputs(np.zeros(FEATURE_DIM), 0.0)
    picks = [policy.act(toy_moves(rng), np.zeros(3), state, epsilon=0.0)[0] for _ in range(n)]
    return np.mean(np.array(picks) == 2)


def test_ppo_learns_to_prefer_the_rewarded_kind_of_move():
    rng = np.random.default_rng(0)
    policy = TilePolicy(TilePolicyConfig(), seed=0)
    before = parallel_probability(policy, rng)
    for _ in range(30):
        steps = []
        for _ in range(16):
            moves = toy_moves(rng)
            state = state_inputs(np.zeros(FEATURE_DIM), 0.0)
            action, logprob, value = policy.act(moves, np.zeros(3), state, epsilon=0.0)
            steps.append(Step(moves, np.zeros(3, np.float32), action, logprob, state, value,
                              reward=float(action == 2) * 0.1, last=True))
        losses = policy.update(steps, epsilon=0.0)
    assert set(losses) >= {"policy_loss", "value_loss", "entropy", "approx_kl"}
    after = parallel_probability(policy, rng)
    assert before < 0.5 and after > 0.8, (before, after)


def test_gae_of_a_two_step_trajectory():
    policy = TilePolicy(TilePolicyConfig(gamma=0.5, gae_lambda=1.0, reward_scale=1.0))
    moves = np.zeros((1, move_inputs(np.zeros(FEATURE_DIM), 0, 0, 0).size), np.float32)
    state = state_inputs(np.zeros(FEATURE_DIM), 0.0)
    steps = [Step(moves, np.zeros(1, np.float32), 0, 0.0, state, value=1.0, reward=1.0,
                  last=False),
             Step(moves, np.zeros(1, np.float32), 0, 0.0, state, value=2.0, reward=3.0,
                  last=True)]
    batch = policy.batch(steps)
    # last: 3 - 2 = 1; first: 1 + 0.5 * 2 - 1 + 0.5 * 1 = 1.5
    assert np.allclose(batch.advantages.numpy(), [1.5, 1.0])
    assert np.allclose(batch.returns.numpy(), [2.5, 3.0])


def test_checkpoint_round_trip_and_no_pickle(tmp_path):
    policy = TilePolicy(TilePolicyConfig(), seed=3)
    path = tmp_path / checkpoint.POLICY_FILE
    checkpoint.save_arrays(path, policy.state_arrays())
    restored = TilePolicy(TilePolicyConfig(), seed=4)
    restored.load_arrays(checkpoint.load_arrays(path))
    for key, value in policy.state_arrays().items():
        assert np.array_equal(value, restored.state_arrays()[key])
    np.savez(tmp_path / "evil.npz", payload=np.array([object()], dtype=object))
    with pytest.raises(ValueError):
        checkpoint.load_arrays(tmp_path / "evil.npz")


def test_adam_steps_exactly_as_torchs_adam():
    torch.manual_seed(0)
    ours, theirs = nn.Linear(6, 3), nn.Linear(6, 3)
    theirs.load_state_dict(ours.state_dict())
    start = ours.weight.detach().clone()
    inputs = torch.randn(8, 6)
    optimizers = (Adam(ours.parameters(), lr=3e-3), torch.optim.Adam(theirs.parameters(), lr=3e-3))
    for step in range(5):
        for net, optimizer in zip((ours, theirs), optimizers, strict=True):
            optimizer.zero_grad()
            # step 2 leaves the bias without a gradient, which both skip
            loss = (net(inputs) ** 2).mean() if step != 2 else net.weight.sum()
            loss.backward()
            optimizer.step()
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(ours.weight, start)
