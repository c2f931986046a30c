"""The graph agent's settings: PPO's hyperparameters and the search's budget (`[graph.rl]` and
`[graph.rl.ppo]` in a config file). Plain dataclasses, so that reading a config imports no
torch."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PPOConfig:
    """Every hyperparameter of the graph agent and its PPO."""

    hidden: int = 64
    """width of the node embeddings and the heads' hidden layers"""
    layers: int = 3
    """message-passing steps of the encoder"""
    learning_rate: float = 3e-3
    """Adam's step size"""
    gamma: float = 0.99
    """discount (X-RLflow's)"""
    gae_lambda: float = 0.95
    """GAE's smoothing between one-step and Monte Carlo advantages (X-RLflow's)"""
    clip: float = 0.3
    """PPO's ratio clip (X-RLflow's)"""
    update_epochs: int = 4
    """passes over a batch of episodes per update"""
    minibatches: int = 2
    """minibatches per pass"""
    value_coef: float = 0.5
    """weight of the value loss"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    max_grad_norm: float = 0.5
    """the actor's gradients and the critic's are each clipped to this norm (one norm over
    both let the critic's loss, large at X-RLflow's reward scale, shrink the actor's steps)"""
    episodes_per_update: int = 4
    """episodes collected before each update"""
    value_scale: float = 10.0
    """the critic predicts returns divided by this (X-RLflow's rewards reach tens: a step that
    saves a tenth of the initial cost earns 10)"""


@dataclass(frozen=True)
class RlConfig:
    """The reinforcement-learning graph search's budget and policy."""

    episodes: int = 24
    """episodes played on the model's graph (the policy fine-tuned on them with PPO)"""
    horizon: int = 6
    """rewrites at most per episode"""
    max_evals: int = 60
    """no episode starts once this many distinct graphs have been costed"""
    max_actions: int = 200
    """rewrites offered per step at most (X-RLflow's location limit)"""
    policy: str = "fresh"
    """the starting policy: fresh (harl ships no pretrained one: pretraining did not beat a
    random policy on held-out graphs), shipped (harl/data/graph_rl_policy.npz where present),
    or the path of a policy .npz written by tools/train_graph_rl.py"""
    fine_tune: bool = True
    """update the policy with PPO on the episodes played (false: play the policy as it is)"""
    seed: int = 0
    """seed of a fresh policy's weights and of the action sampling"""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO's hyperparameters (a loaded policy keeps its own width and depth)"""

    def __post_init__(self) -> None:
        if self.episodes < 0 or self.horizon < 1 or self.max_evals < 1:
            raise ValueError("graph.rl needs episodes >= 0, horizon >= 1 and max_evals >= 1")
