"""The tile tuner's actor-critic: which proposed move a trajectory follows, trained with PPO.

At each trajectory step the tuner proposes a few legal moves (one decision changed each). The actor
scores every move from the pooled program features of the state it leads to, the kind of decision
it changes, the cost model's predicted change and how far the trajectory has gone; a softmax over
those scores, plus a fixed prior that leans towards the cost model's favourite, is the policy.
The critic values the current state. Rewards are the cost model's predicted improvement of each
step, corrected by real measurements once the batch has run (see `TileTuner.correct`).

Reads top to bottom like CleanRL's ppo.py: config, network, rollout buffer, update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from harl.agents.adam import Adam
from harl.report.metrics import MetricsLogger

FEATURE_DIM = 2 * 164  # PerStoreFeature per store (164), pooled by mean and max
SITE_KINDS = ("tile", "categorical", "compute_location", "parallel")
MOVE_DIM = FEATURE_DIM + len(SITE_KINDS) + 2  # + predicted score change, trajectory progress
STATE_DIM = FEATURE_DIM + 1  # + trajectory progress


@dataclass(frozen=True)
class TilePolicyConfig:
    """Hyperparameters of the tile tuner's actor-critic (PPO)."""

    hidden: int = 64
    """width of the actor's and critic's hidden layer"""
    learning_rate: float = 3e-3
    """Adam step size"""
    gamma: float = 0.9
    """discount of later steps of a trajectory"""
    gae_lambda: float = 0.95
    """GAE smoothing between one-step and Monte Carlo advantages"""
    clip: float = 0.2
    """PPO ratio clip"""
    update_epochs: int = 4
    """passes over a batch's rollouts per update"""
    value_coef: float = 0.5
    """weight of the critic's loss"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    prior_scale: float = 20.0
    """logit added per unit of predicted score change: the cost-model prior the actor refines"""
    reward_scale: float = 10.0
    """rewards are score changes times this (scores are normalised throughputs in [0, 1])"""


def move_inputs(next_features: np.ndarray, site_kind: int, score_change: float,
                progress: float) -> np.ndarray:
    """The actor's input for one proposed move."""
    kind = np.zeros(len(SITE_KINDS), dtype=np.float32)
    kind[site_kind] = 1.0
    return np.concatenate([next_features.astype(np.float32), kind,
                           np.array([score_change, progress], dtype=np.float32)])


def state_inputs(features: np.ndarray, progress: float) -> np.ndarray:
    """The critic's input for one state."""
    return np.concatenate([features.astype(np.float32), np.array([progress], dtype=np.float32)])


class ActorCritic(nn.Module):
    """A per-move scorer (actor) and a state value (critic), small MLPs."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(MOVE_DIM, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.critic = nn.Sequential(nn.Linear(STATE_DIM, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.actor[-1].weight)  # start as the cost-model prior alone
        nn.init.zeros_(self.actor[-1].bias)

    def logits(self, moves: torch.Tensor, prior: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """moves: (B, P, MOVE_DIM); prior, mask: (B, P). Masked moves get -inf."""
        scores = self.actor(moves).squeeze(-1) + prior
        return scores.masked_fill(~mask, -torch.inf)

    def value(self, states: torch.Tensor) -> torch.Tensor:
        return self.critic(states).squeeze(-1)


class RolloutBatch(NamedTuple):
    """One PPO batch: a step per row, moves padded to the widest step."""

    moves: torch.Tensor  # (N, P, MOVE_DIM)
    prior: torch.Tensor  # (N, P)
    mask: torch.Tensor  # (N, P) bool
    actions: torch.Tensor  # (N,)
    logprobs: torch.Tensor  # (N,)
    states: torch.Tensor  # (N, STATE_DIM)
    advantages: torch.Tensor  # (N,)
    returns: torch.Tensor  # (N,)


@dataclass
class Step:
    """One recorded trajectory step (rewards may be corrected after measurement)."""

    moves: np.ndarray
    prior: np.ndarray
    action: int
    logprob: float
    state: np.ndarray
    value: float
    reward: float
    last: bool  # the trajectory's final step


class TilePolicy:
    """The actor-critic shared by every sketch of every task of a run."""

    def __init__(self, config: TilePolicyConfig, seed: int = 0,
                 metrics: MetricsLogger | None = None) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else MetricsLogger()
        self.generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        self.net = ActorCritic(config.hidden)
        self.optimizer = Adam(self.net.parameters(), lr=config.learning_rate)
        self.updates = 0

    def act(self, moves: np.ndarray, score_changes: np.ndarray, state: np.ndarray,
            epsilon: float) -> tuple[int, float, float]:
        """Sample a move (uniformly with probability epsilon); return it, its log-prob, value."""
        with self.metrics.stage_timing("tile/policy_seconds"), torch.no_grad():
            probs = self._probs(torch.from_numpy(moves)[None], self._prior(score_changes)[None],
                                torch.ones(1, len(moves), dtype=torch.bool), epsilon)[0]
            action = int(torch.multinomial(probs, 1, generator=self.generator))
            value = float(self.net.value(torch.from_numpy(state)[None])[0])
        return action, float(torch.log(probs[action])), value

    def _prior(self, score_changes: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(self.config.prior_scale * score_changes, dtype=torch.float32)

    def _probs(self, moves, prior, mask, epsilon: float) -> torch.Tensor:
        greedy = torch.softmax(self.net.logits(moves, prior, mask), dim=-1)
        uniform = mask.float() / mask.float().sum(-1, keepdim=True)
        return (1 - epsilon) * greedy + epsilon * uniform

    def batch(self, steps: list[Step]) -> RolloutBatch:
        """Pad the steps into tensors and compute GAE advantages per trajectory."""
        cfg = self.config
        width = max(len(s.moves) for s in steps)
        moves = np.zeros((len(steps), width, MOVE_DIM), dtype=np.float32)
        prior = np.zeros((len(steps), width), dtype=np.float32)
        mask = np.zeros((len(steps), width), dtype=bool)
        for i, step in enumerate(steps):
            moves[i, : len(step.moves)] = step.moves
            prior[i, : len(step.prior)] = cfg.prior_scale * step.prior
            mask[i, : len(step.moves)] = True
        values = np.array([s.value for s in steps], dtype=np.float32)
        rewards = np.array([s.reward * cfg.reward_scale for s in steps], dtype=np.float32)
        advantages = np.zeros(len(steps), dtype=np.float32)
        running = 0.0
        for i in reversed(range(len(steps))):  # GAE; a trajectory's last step bootstraps 0
            next_value = 0.0 if steps[i].last else values[i + 1]
            running = 0.0 if steps[i].last else running
            delta = rewards[i] + cfg.gamma * next_value - values[i]
            running = delta + cfg.gamma * cfg.gae_lambda * running
            advantages[i] = running
        return RolloutBatch(
            moves=torch.from_numpy(moves), prior=torch.from_numpy(prior),
            mask=torch.from_numpy(mask),
            actions=torch.tensor([s.action for s in steps]),
            logprobs=torch.tensor([s.logprob for s in steps], dtype=torch.float32),
            states=torch.from_numpy(np.stack([s.state for s in steps])),
            advantages=torch.from_numpy(advantages),
            returns=torch.from_numpy(advantages + values),
        )

    def update(self, steps: list[Step], epsilon: float) -> dict[str, float]:
        """PPO on one batch of steps; returns the losses for the metrics file."""
        if len(steps) < 2:
            return {}
        with self.metrics.stage_timing("tile/policy_seconds"):
            return self._update(steps, epsilon)

    def _update(self, steps: list[Step], epsilon: float) -> dict[str, float]:
        """`update`'s PPO epochs, top to bottom."""
        cfg = self.config
        data = self.batch(steps)
        advantages = data.advantages
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        for _ in range(cfg.update_epochs):
            # --- policy loss (clipped ratio) ---
            probs = self._probs(data.moves, data.prior, data.mask, epsilon)
            logprobs = torch.log(probs.gather(1, data.actions[:, None]).squeeze(1) + 1e-12)
            log_ratio = logprobs - data.logprobs
            ratio = torch.exp(log_ratio)
            policy_loss = -torch.min(ratio * advantages,
                                     ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * advantages).mean()
            # --- value loss and entropy ---
            value_loss = 0.5 * ((self.net.value(data.states) - data.returns) ** 2).mean()
            entropy = -(probs * torch.log(probs + 1e-12)).sum(-1).mean()
            loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
            self.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
            self.optimizer.step()
        self.updates += 1
        # --- is it learning? (CleanRL's diagnostics, on the last epoch) ---
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean().item()  # k3: unbiased, never < 0
            clip_fraction = ((ratio - 1).abs() > cfg.clip).float().mean().item()
            values = data.returns - data.advantages  # the critic's, when the steps were taken
            spread = data.returns.var().item()
            explained = (1 - (data.returns - values).var().item() / spread
                         if spread > 0 else float("nan"))
        return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
                "entropy": entropy.item(), "approx_kl": approx_kl,
                "clip_fraction": clip_fraction, "explained_variance": explained,
                "mean_reward": float(np.mean([s.reward for s in steps]))}

    # --- checkpoints: plain arrays, never pickle ---

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.net.state_dict().items()}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.net.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})
