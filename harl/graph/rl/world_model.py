"""RLFlow's world model of graph rewriting: a graph encoder gives each graph a latent vector, and
an MDN-RNN (a GRU over [latent, action]) predicts from its state a mixture of Gaussians over the
next graph's latent, the step's reward and whether the episode ends there.

In harl the expensive part of a real step is the cost estimate; applying a rewrite and finding
the next graph's matches is cheap and exact. So the model stands in for the cost (its reward
head is what the dream reads, `harl.graph.rl.dream`); the next-latent head is RLFlow's
predictive objective, which makes the recurrent state carry what the episode did so far, and
a measure of how well the model knows the graphs. The encoder is the policy's (`Encoder`), a
copy of its own; an action is its rule's embedding and the mean embedding of the nodes its match
binds, as in the policy's match head.

The model is fitted on transitions logged in real episodes (`Transition`, batched whole
episodes at a time as a `SequenceBatch`), and scored on real transitions it was not fitted on
(`quality`). It saves as arrays and JSON, never pickle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harl.agents.adam import Adam
from harl.graph.rl.config import MdnRnnConfig
from harl.graph.rl.env import Observation
from harl.graph.rl.policy import Encoder, GraphBatch, batch_observations, segment_mean
from harl.graph.rl.saving import load_network, save_network


class Transition(NamedTuple):
    """One real step as logged for the world model."""

    obs: Observation
    action: int
    """an index into `obs.actions`; `len(obs.actions)` is the stop"""
    reward: float
    terminated: bool
    """the episode ended here by a stop or with no rewrite left (not by the horizon)"""
    next_obs: Observation


class SequenceBatch(NamedTuple):
    """Whole episodes of transitions as tensors, padded to the longest: B episodes, T steps."""

    graphs: GraphBatch  # every distinct observation of the episodes
    obs: torch.Tensor  # (B, T) the step's observation, an index into `graphs`
    next_obs: torch.Tensor  # (B, T) the observation after the step
    action: torch.Tensor  # (B, T) the action, an index into `graphs`' actions; -1 for a stop
    rule: torch.Tensor  # (B, T) the action's rule; the rule count for a stop
    reward: torch.Tensor  # (B, T)
    terminated: torch.Tensor  # (B, T) float
    mask: torch.Tensor  # (B, T) bool: a real step, not padding


class Prediction(NamedTuple):
    """The heads' outputs for each step."""

    mixture_logits: torch.Tensor  # (..., K)
    mean: torch.Tensor  # (..., K, latent)
    log_std: torch.Tensor  # (..., K, latent)
    reward: torch.Tensor  # (...,) divided by the config's reward_scale
    done_logit: torch.Tensor  # (...,)


def batch_episodes(episodes: Sequence[Sequence[Transition]], rules: int) -> SequenceBatch:
    """`episodes` (each non-empty, over `rules` rules) as one `SequenceBatch`; an observation
    that is one step's next and the following step's own is encoded once."""
    index: dict[int, int] = {}
    observations: list[Observation] = []

    def at(obs: Observation) -> int:
        if id(obs) not in index:
            index[id(obs)] = len(observations)
            observations.append(obs)
        return index[id(obs)]

    shape = (len(episodes), max(len(e) for e in episodes))
    obs, next_obs, action = (np.zeros(shape, dtype=np.int64) for _ in range(3))
    stop, mask = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    reward, terminated = np.zeros(shape, dtype=np.float32), np.zeros(shape, dtype=np.float32)
    for b, episode in enumerate(episodes):
        for t, step in enumerate(episode):
            obs[b, t], next_obs[b, t] = at(step.obs), at(step.next_obs)
            stop[b, t] = step.action >= len(step.obs.actions)
            action[b, t] = 0 if stop[b, t] else step.action
            reward[b, t], terminated[b, t], mask[b, t] = step.reward, step.terminated, True
    graphs = batch_observations(observations, rules)
    obs_t, stop_t = torch.from_numpy(obs), torch.from_numpy(stop)
    flat = graphs.action_offset[obs_t] + torch.from_numpy(action)
    flat = torch.where(stop_t, -1, flat)
    rule = (torch.where(stop_t, rules, graphs.action_rule[flat.clamp(min=0)])
            if len(graphs.action_rule) else torch.full(shape, rules))
    return SequenceBatch(graphs, obs_t, torch.from_numpy(next_obs), flat, rule,
                         torch.from_numpy(reward), torch.from_numpy(terminated),
                         torch.from_numpy(mask))


def mixture_nll(pred: Prediction, target: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of `target` (..., latent) under the predicted mixture, per
    latent dim."""
    z = (target.unsqueeze(-2) - pred.mean) * torch.exp(-pred.log_std)
    per_component = (-0.5 * z.pow(2) - pred.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_mix = torch.log_softmax(pred.mixture_logits, dim=-1)
    return -torch.logsumexp(log_mix + per_component, dim=-1) / target.shape[-1]


def _mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))


class WorldModel(nn.Module):
    """The encoder, the GRU and the three heads (see the module docstring)."""

    def __init__(self, *, node_dim: int, edge_dim: int, rules: int,
                 config: MdnRnnConfig) -> None:
        super().__init__()
        self.node_dim, self.edge_dim, self.rules, self.config = node_dim, edge_dim, rules, config
        c = config
        self.encoder = Encoder(node_dim=node_dim, edge_dim=edge_dim, hidden=c.hidden,
                               layers=c.layers)
        self.to_latent = nn.Linear(2 * c.hidden, c.latent)
        self.latent_norm = nn.LayerNorm(c.latent, elementwise_affine=False)  # no shrinking
        self.rule_embed = nn.Embedding(rules + 1, c.hidden)  # the last row: stop
        step_input = c.latent + 2 * c.hidden
        self.cell = nn.GRUCell(step_input, c.recurrent)
        width = c.recurrent + step_input  # the heads read the state and the step's input
        self.mixture_head = _mlp(width, c.recurrent, c.mixtures * (1 + 2 * c.latent))
        self.reward_head = _mlp(width, c.recurrent, 1)
        self.done_head = _mlp(width, c.recurrent, 1)
        self.register_buffer("reward_mean", torch.zeros(()))  # of the fitted rewards

    # --- the pieces ------------------------------------------------------------------------------

    def encode(self, graphs: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(each graph's latent (graphs, latent), each action's mean bound-node embedding
        (actions, hidden))."""
        nodes, pooled = self.encoder(graphs)
        latent = self.latent_norm(self.to_latent(pooled))
        bound = segment_mean(nodes[graphs.bind_node], graphs.bind_action,
                             len(graphs.action_rule))
        return latent, bound

    def step_input(self, latent: torch.Tensor, bound: torch.Tensor, action: torch.Tensor,
                   rule: torch.Tensor) -> torch.Tensor:
        """[latent, rule embedding, bound nodes' embedding] per step; a stop (`action` -1)
        binds no nodes."""
        if len(bound):
            nodes = bound[action.clamp(min=0)] * (action >= 0).unsqueeze(-1)
        else:
            nodes = latent.new_zeros((*action.shape, self.config.hidden))
        return torch.cat([latent, self.rule_embed(rule), nodes], dim=-1)

    def heads(self, state: torch.Tensor, step_input: torch.Tensor) -> Prediction:
        c = self.config
        u = torch.cat([state, step_input], dim=-1)
        mix = self.mixture_head(u).unflatten(-1, (c.mixtures, 1 + 2 * c.latent))
        return Prediction(mix[..., 0], mix[..., 1: 1 + c.latent],
                          mix[..., 1 + c.latent:].clamp(c.min_log_std, 2.0),
                          self.reward_head(u).squeeze(-1), self.done_head(u).squeeze(-1))

    def forward(self, batch: SequenceBatch) -> tuple[Prediction, torch.Tensor]:
        """(the predictions for every step, the real next latents they aim at, detached)."""
        latents, bound = self.encode(batch.graphs)
        x = self.step_input(latents[batch.obs], bound, batch.action, batch.rule)
        state = x.new_zeros((len(x), self.config.recurrent))
        states = []
        for t in range(x.shape[1]):  # padding comes after an episode's steps: it changes none
            state = self.cell(x[:, t], state)
            states.append(state)
        return self.heads(torch.stack(states, dim=1), x), latents[batch.next_obs].detach()

    # --- one imagined step (the dream) -----------------------------------------------------------

    @torch.no_grad()
    def encode_observation(self, obs: Observation) -> tuple[torch.Tensor, torch.Tensor]:
        """(the graph's latent (latent,), its actions' bound-node embeddings (actions, hidden))."""
        latent, bound = self.encode(batch_observations([obs], self.rules))
        return latent[0], bound

    @torch.no_grad()
    def imagine(self, latent: torch.Tensor, bound: torch.Tensor, action: int, rule: int,
                state: torch.Tensor) -> tuple[float, float, torch.Tensor]:
        """(the predicted reward, the predicted chance the episode ends, the next state) of
        taking `action` (an index into `bound`'s rows, -1 for a stop) of `rule` from `state`
        ((1, recurrent))."""
        x = self.step_input(latent[None], bound, torch.tensor([action]), torch.tensor([rule]))
        state = self.cell(x, state)
        pred = self.heads(state, x)
        reward = float(pred.reward[0]) * self.config.reward_scale
        return reward, float(torch.sigmoid(pred.done_logit[0])), state

    def initial_state(self) -> torch.Tensor:
        return torch.zeros((1, self.config.recurrent))

    # --- fitting and scoring on real transitions -------------------------------------------------

    def losses(self, batch: SequenceBatch) -> dict[str, torch.Tensor]:
        """The masked mean next-latent NLL, reward squared error (scaled) and done BCE."""
        pred, target = self(batch)
        m = batch.mask
        return {"latent": mixture_nll(pred, target)[m].mean(),
                "reward": (pred.reward - batch.reward / self.config.reward_scale)[m]
                .pow(2).mean(),
                "done": F.binary_cross_entropy_with_logits(pred.done_logit[m],
                                                           batch.terminated[m])}

    def fit(self, episodes: Sequence[Sequence[Transition]], *, epochs: int | None = None,
            seed: int = 0) -> dict[str, float]:
        """Train on `episodes` (real ones) for `epochs` passes (the config's by default),
        from the current weights; the last pass's mean losses. Episodes are grouped into
        minibatches once (building a batch costs more than a gradient step), their order
        shuffled each pass."""
        c = self.config
        episodes = [e for e in episodes if e]
        if not episodes:
            return {}
        self.reward_mean.fill_(float(np.mean([s.reward for e in episodes for s in e])))
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(episodes))
        chunks = np.array_split(order, math.ceil(len(episodes) / c.minibatch_episodes))
        batches = [batch_episodes([episodes[i] for i in chunk], self.rules) for chunk in chunks]
        optimizer = Adam(self.parameters(), lr=c.learning_rate)
        sums: dict[str, float] = {}
        for _ in range(c.epochs if epochs is None else epochs):
            sums = {"latent": 0.0, "reward": 0.0, "done": 0.0}
            for i in rng.permutation(len(batches)):
                parts = self.losses(batches[i])
                loss = (c.latent_coef * parts["latent"] + parts["reward"]
                        + c.done_coef * parts["done"])
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.parameters(), c.max_grad_norm)
                optimizer.step()
                for key, value in parts.items():
                    sums[key] += value.item() / len(batches)
        return {f"world/fit_{key}_loss": value for key, value in sums.items()}

    @torch.no_grad()
    def quality(self, held_out: Sequence[Sequence[Transition]]) -> dict[str, float]:
        """How well the model predicts real transitions it was not fitted on: the next latent's
        NLL per dim, the reward's mean absolute error and explained variance (against the
        MAE of predicting the fitted mean reward), and the done head's accuracy."""
        held_out = [e for e in held_out if e]
        if not held_out:
            return {}
        batch = batch_episodes(held_out, self.rules)
        pred, target = self(batch)
        m = batch.mask
        reward = batch.reward[m]
        predicted = pred.reward[m] * self.config.reward_scale
        spread = float(reward.var(unbiased=False))
        explained = (1.0 - float((reward - predicted).var(unbiased=False)) / spread
                     if spread > 0 else float("nan"))
        done = ((pred.done_logit[m] > 0).float() == batch.terminated[m]).float()
        return {"world/next_latent_nll": float(mixture_nll(pred, target)[m].mean()),
                "world/reward_mae": float((reward - predicted).abs().mean()),
                "world/reward_mae_of_mean": float((reward - self.reward_mean).abs().mean()),
                "world/reward_explained_variance": explained,
                "world/done_accuracy": float(done.mean()),
                "world/held_out_steps": float(m.sum())}


# --- making and saving: plain arrays and JSON, never pickle ---------------------------------------


def make_world_model(*, node_dim: int, edge_dim: int, rules: int, config: MdnRnnConfig,
                     seed: int = 0) -> WorldModel:
    """A fresh world model, its weights drawn from `seed`."""
    torch.manual_seed(seed)
    return WorldModel(node_dim=node_dim, edge_dim=edge_dim, rules=rules, config=config)


def save_world_model(path: Path, model: WorldModel, *, rule_names: tuple[str, ...],
                     manifest: dict | None = None) -> None:
    """`path` (.npz) holds the weights; `path` with .json the shapes, the config, the rules and
    `manifest`'s fields."""
    save_network(path, model, {
        **(manifest or {}), "config": asdict(model.config), "node_dim": model.node_dim,
        "edge_dim": model.edge_dim, "rules": list(rule_names)})


def load_world_model(path: Path) -> tuple[WorldModel, dict]:
    """The world model saved at `path` (.npz read with allow_pickle=False) and its manifest."""
    return load_network(path, lambda manifest: WorldModel(
        node_dim=manifest["node_dim"], edge_dim=manifest["edge_dim"],
        rules=len(manifest["rules"]), config=MdnRnnConfig(**manifest["config"])))
