"""RLFlow's agent trained in its own world model: the dream environment and the training loop.

`DreamEnv` has `GraphRewriteEnv`'s API, and its graph moves are the real ones (the rewrite
applied, the legal actions from the real matcher, shared with the real env's caches), but its
rewards are the world model's predictions, the model's recurrent state carried through the
episode: it never asks for a cost estimate, the expensive part of a real step. An episode ends
as a real one does (a stop, no rewrite left, the horizon), facts the dream knows exactly; the
model's done head is fitted and scored but not needed. What the dream cannot know is a rewrite
whose graph has no finite cost: it is masked once a real episode meets it.

`train_in_dream` is the loop, read top to bottom: each round plays a few real episodes with the
controller (the graph policy) logging transitions and costs, scores the world model on them
before it sees them, refits it on every real transition so far, and trains the controller with
PPO on dream episodes alone; it stops at a budget of real cost estimates (distinct graphs
costed), and ends with the controller's most likely episode in the real env. The result is the
cheapest graph really costed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from harl.graph.rl.config import WorldModelConfig
from harl.graph.rl.env import Best, GraphRewriteEnv, Observation, RewriteGraph
from harl.graph.rl.policy import GraphPolicy
from harl.graph.rl.ppo import Trainer, make_policy
from harl.graph.rl.world_model import Transition, WorldModel, make_world_model
from harl.graph.search.common import CostMemo

log = logging.getLogger(__name__)


class DreamEnv(gym.Env):
    """`real`'s start graph rewritten one action at a time, each step's reward predicted by
    `model` (see the module docstring); `info["action_mask"]` as the real env's."""

    metadata = {"render_modes": []}

    def __init__(self, real: GraphRewriteEnv, model: WorldModel) -> None:
        self.real, self.model = real, model
        self.action_space, self.observation_space = real.action_space, real.observation_space
        self.horizon = real.horizon
        self._encoded: dict[object, tuple[torch.Tensor, torch.Tensor]] = {}  # by graph key
        self.graph, self.steps, self.state = real.start, 0, model.initial_state()
        self._obs: Observation | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.graph, self.steps, self.state = self.real.start, 0, self.model.initial_state()
        return self._observe(), self._info()

    def step(self, action: int):
        obs = self._obs
        assert obs is not None, "reset() first"
        if not 0 <= action <= len(obs.actions):
            raise ValueError(f"action {action} outside 0..{len(obs.actions)}")
        self.steps += 1
        reward, stopped = 0.0, action == len(obs.actions)  # a stop earns 0, as in the real env
        if not stopped:
            chosen = obs.actions[action]
            new = self.real.successor(self.graph, chosen)
            if new is None:  # the rewrite fails: masked, as the real env does
                self.real.mark_failed(self.graph, chosen)
            else:
                latent, bound = self._encode(self.graph, obs)
                reward, _, self.state = self.model.imagine(latent, bound, action, chosen.rule,
                                                           self.state)
                self.graph = new
        obs = self._observe()
        terminated = stopped or not obs.actions
        truncated = not terminated and self.steps >= self.horizon
        return obs, reward, terminated, truncated, self._info()

    def _encode(self, graph: RewriteGraph, obs: Observation):
        """The model's encoding of `graph` (fixed while the controller trains: the model is
        refitted between dreams, each in a new DreamEnv)."""
        key = (graph.key(), len(obs.actions))  # a newly failed rewrite shortens the actions
        if key not in self._encoded:
            self._encoded[key] = self.model.encode_observation(obs)
        return self._encoded[key]

    def _observe(self) -> Observation:
        self._obs = self.real.observe(self.graph)
        return self._obs

    def _info(self) -> dict:
        mask = np.zeros(self.real.max_actions + 1, dtype=bool)
        mask[: len(self._obs.actions) + 1] = True
        return {"action_mask": mask}


def real_episode(env: GraphRewriteEnv, policy: GraphPolicy, costs: CostMemo, *,
                 max_evals: int, generator: torch.Generator, greedy: bool = False,
                 explore: float = 0.0) -> list[Transition]:
    """One episode in the real env, its transitions logged, each step a uniformly random
    rewrite with chance `explore`, else the policy's; it ends early rather than take a step
    whose graph would cost a real estimate beyond `max_evals`."""
    obs, _ = env.reset()
    steps, done = [], False
    while not done:
        action, _, _ = policy.act(obs, generator=generator, greedy=greedy)
        if obs.actions and float(torch.rand(1, generator=generator)) < explore:
            action = int(torch.randint(len(obs.actions), (1,), generator=generator))
        if (action < len(obs.actions) and costs.evals >= max_evals
                and not costs.known(env.successor(env.graph, obs.actions[action]))):
            break
        next_obs, reward, terminated, truncated, _ = env.step(action)
        steps.append(Transition(obs, action, reward, terminated, next_obs))
        done = terminated or truncated
        obs = next_obs
    return steps


@dataclass
class DreamResult:
    """What the world-model search found and what it cost."""

    best: Best
    """the cheapest graph really costed, its rewrites and their costs"""
    initial_cost: float
    evals: int = 0
    """real cost estimates (distinct graphs costed, the start included)"""
    rounds: int = 0
    real_episodes: int = 0
    """real episodes played, the final greedy one included"""
    dream_episodes: int = 0
    updates: int = 0
    """PPO updates of the controller (all on dream episodes)"""
    quality: dict = field(default_factory=dict)
    """the world model's scores on the last round's real episodes, before it was fitted on them"""
    metrics: dict = field(default_factory=dict)
    """the last refit's losses and the last PPO update's diagnostics"""


def train_in_dream(start: RewriteGraph, cost: Callable[[RewriteGraph], float], *,
                   config: WorldModelConfig, model: WorldModel | None = None,
                   policy: GraphPolicy | None = None) -> DreamResult:
    """Search `start`'s rewrites with a controller trained in a world model (the module
    docstring); `cost` is called at most `config.max_evals` times, once per distinct graph.
    `model` and `policy`: pretrained ones to fine-tune (None: fresh ones from `config`); a given
    policy keeps its width and depth (`config.ppo`'s other fields drive its fine-tuning) and a
    given model fits with its own `MdnRnnConfig`."""
    node_dim, edge_dim = start.node_features().shape[1], start.edges()[1].shape[1]
    rules = len(start.rule_names)
    costs = CostMemo(cost, key=lambda graph: graph.key())
    env = GraphRewriteEnv(start, costs, horizon=config.horizon, max_actions=config.max_actions)
    if policy is None:
        policy = make_policy(node_dim=node_dim, edge_dim=edge_dim, rules=rules,
                             config=config.ppo, seed=config.seed)
    trainer = Trainer(policy, config.ppo, seed=config.seed)
    if model is None:
        model = make_world_model(node_dim=node_dim, edge_dim=edge_dim, rules=rules,
                                 config=config.model, seed=config.seed + 1)
    logged: list[list[Transition]] = []
    result = DreamResult(env.best, env.initial_cost)
    for round_ in range(config.rounds):
        if costs.evals >= config.max_evals and round_ > 0:
            break
        result.rounds += 1
        # --- 1. real episodes: the controller's (and some random rewrites), logging -------
        new = [real_episode(env, trainer.policy, costs, max_evals=config.max_evals,
                            generator=trainer.generator, explore=config.explore)
               for _ in range(config.real_episodes)]
        result.real_episodes += len(new)
        # --- 2. the world model: scored on them before it sees them, then refitted ----------
        if logged and any(new):
            result.quality = model.quality(new)
        logged.extend(e for e in new if e)
        result.metrics.update(model.fit(logged, seed=config.seed + round_))
        # --- 3. the controller, trained by PPO in the dream alone ---------------------------
        dream, steps = DreamEnv(env, model), []
        for episode in range(1, config.dream_episodes + 1):
            steps += trainer.episode(dream)
            result.dream_episodes += 1
            if episode % config.ppo.episodes_per_update == 0:
                result.metrics.update(trainer.update(steps))
                steps = []
        log.debug("worldmodel round %d: %d real estimates, best %.6g, quality %s", round_,
                  costs.evals, env.best.cost, result.quality)
    # --- 4. the controller's most likely episode, in the real env -----------------------------
    real_episode(env, trainer.policy, costs, max_evals=config.max_evals,
                 generator=trainer.generator, greedy=True)
    result.real_episodes += 1
    result.best, result.evals, result.updates = env.best, costs.evals, trainer.updates
    result.metrics = {k: v for k, v in result.metrics.items() if math.isfinite(v)}
    return result
