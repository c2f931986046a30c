"""PPO for the graph agent, read top to bottom like CleanRL's ppo.py: the hyperparameters, the
rollout (whole episodes in a `GraphRewriteEnv`), GAE, the clipped update and its diagnostics,
then a fresh policy (`harl.graph.rl.saving` saves and loads it as plain arrays).

The horizon ends an episode for good (X-RLflow's "done"), so the last step's value target is its
reward alone. Several graphs train one policy: each episode runs in the env it is given. The
same loop trains GO's policy (`harl.graph.rl.go_policy`), whose action is a take mask over
the observation's matches, in GO's env of passes (`harl.graph.rl.go_env`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from harl.agents.adam import Adam
from harl.graph.rl.config import PPOConfig
from harl.graph.rl.env import GraphRewriteEnv, Observation
from harl.graph.rl.policy import GraphPolicy, batch_observations


@dataclass
class Step:
    """One step of an episode."""

    obs: Observation
    action: int | np.ndarray
    """an index into the observation's actions (stop: their count), or GO's take mask"""
    logprob: float
    value: float
    reward: float
    done: bool
    """the episode ended after this step"""


def gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, *, gamma: float,
        lam: float, last_value: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, returns) by generalised advantage estimation over consecutive steps;
    `dones[t]` ends an episode after step t (no bootstrap past it), `last_value` values the
    state after the last step where it does not."""
    advantages = np.zeros(len(rewards), dtype=np.float32)
    running = 0.0
    for t in reversed(range(len(rewards))):
        going_on = 1.0 - float(dones[t])
        next_value = values[t + 1] if t + 1 < len(rewards) else last_value
        delta = rewards[t] + gamma * next_value * going_on - values[t]
        running = delta + gamma * lam * going_on * running
        advantages[t] = running
    return advantages, advantages + np.asarray(values, dtype=np.float32)


def stack_actions(actions: list) -> torch.Tensor:
    """Steps' actions as one tensor: indices as (steps,); take masks of different lengths
    (GO's, a bool per match) as (steps, longest) bool, padded with False."""
    if not actions or not isinstance(actions[0], np.ndarray):
        return torch.tensor(actions)
    out = torch.zeros((len(actions), max(len(a) for a in actions)), dtype=torch.bool)
    for i, take in enumerate(actions):
        out[i, : len(take)] = torch.from_numpy(take.astype(bool))
    return out


class Trainer:
    """A `GraphPolicy` (or a `GoPolicy`) and its optimiser, collecting episodes and updating
    with PPO."""

    def __init__(self, policy: GraphPolicy, config: PPOConfig, *, seed: int = 0) -> None:
        self.policy, self.config = policy, config
        self.optimizer = Adam(policy.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(seed)
        self.updates, self.episodes = 0, 0

    # --- rollout -------------------------------------------------------------------------------

    def episode(self, env: GraphRewriteEnv, *, greedy: bool = False) -> list[Step]:
        """One episode in `env` (sampled, or the most likely actions with `greedy`)."""
        obs, _ = env.reset()
        steps, done = [], False
        while not done:
            action, logprob, value = self.policy.act(obs, generator=self.generator,
                                                     greedy=greedy)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            steps.append(Step(obs, action, logprob, value, reward, done))
            obs = next_obs
        self.episodes += 1
        return steps

    # --- update --------------------------------------------------------------------------------

    def update(self, steps: list[Step]) -> dict[str, float]:
        """PPO on the steps of whole episodes; returns the update's diagnostics."""
        cfg = self.config
        values = cfg.value_scale * np.array([s.value for s in steps], dtype=np.float32)
        advantages, returns = gae(np.array([s.reward for s in steps], dtype=np.float32), values,
                                  np.array([s.done for s in steps]), gamma=cfg.gamma,
                                  lam=cfg.gae_lambda)
        advantages_t, returns_t = torch.from_numpy(advantages), torch.from_numpy(returns)
        old_logprobs = torch.tensor([s.logprob for s in steps], dtype=torch.float32)
        taken = stack_actions([s.action for s in steps])
        order = np.arange(len(steps))
        rng = np.random.default_rng(self.updates)
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [],
                                         "approx_kl": [], "clip_fraction": []}
        for _ in range(cfg.update_epochs):
            rng.shuffle(order)
            for idx in np.array_split(order, min(cfg.minibatches, len(steps))):
                batch = batch_observations([steps[i].obs for i in idx], self.policy.rules)
                logprobs, entropy, new_values = self.policy.evaluate(batch, taken[idx])
                # --- policy loss (clipped ratio), advantages normalised per minibatch ---
                adv = advantages_t[idx]
                if len(idx) > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                log_ratio = logprobs - old_logprobs[idx]
                ratio = log_ratio.exp()
                policy_loss = -torch.min(ratio * adv,
                                         ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv).mean()
                # --- value loss and entropy ---
                value_loss = 0.5 * ((new_values - returns_t[idx] / cfg.value_scale) ** 2).mean()
                loss = (policy_loss + cfg.value_coef * value_loss
                        - cfg.entropy_coef * entropy.mean())
                self.optimizer.zero_grad()
                loss.backward()
                for group in self.policy.parameter_groups():  # the critic's large
                    torch.nn.utils.clip_grad_norm_(group, cfg.max_grad_norm)  # loss apart
                self.optimizer.step()
                # --- is it learning? (CleanRL's diagnostics) ---
                with torch.no_grad():
                    stats["approx_kl"].append(((ratio - 1) - log_ratio).mean().item())  # k3
                    stats["clip_fraction"].append(
                        ((ratio - 1).abs() > cfg.clip).float().mean().item())
                stats["policy_loss"].append(policy_loss.item())
                stats["value_loss"].append(value_loss.item())
                stats["entropy"].append(entropy.mean().item())
        self.updates += 1
        spread = float(np.var(returns))
        explained = (1.0 - float(np.var(returns - values)) / spread if spread > 0
                     else float("nan"))
        out = {f"losses/{k}": float(np.mean(v)) for k, v in stats.items()}
        out.update({"losses/explained_variance": explained,
                    "charts/mean_reward": float(np.mean([s.reward for s in steps])),
                    "charts/episode_return": float(sum(s.reward for s in steps)
                                                   / max(1, sum(s.done for s in steps)))})
        return out


# --- a fresh policy (saved and loaded by harl.graph.rl.saving) ------------------------------------


def make_policy(*, node_dim: int, edge_dim: int, rules: int, config: PPOConfig,
                seed: int = 0) -> GraphPolicy:
    """A fresh policy, its weights drawn from `seed`."""
    torch.manual_seed(seed)
    return GraphPolicy(node_dim=node_dim, edge_dim=edge_dim, rules=rules, hidden=config.hidden,
                       layers=config.layers)
