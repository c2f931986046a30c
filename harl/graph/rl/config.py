"""The graph agents' settings: PPO's hyperparameters and the searches' budgets (`[graph.rl]`,
`[graph.rl.ppo]`, `[graph.worldmodel]` and its `.model` and `.ppo`, `[graph.go]` and its
`.ppo` in a config file). Plain dataclasses, so that reading a config imports no torch."""

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
    policy: str = "shipped"
    """the starting policy: shipped (harl/data/graph_rl_policy.npz: trained across small graphs
    by tools/train_graph_rl.py; used where its rules are the search's), fresh, or the path of a
    policy .npz written by that tool"""
    fine_tune: bool = True
    """update the policy with PPO on the episodes played (false: play the policy as it is)"""
    seed: int = 0
    """seed of a fresh policy's weights and of the action sampling"""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO's hyperparameters (a loaded policy keeps its own width and depth)"""

    def __post_init__(self) -> None:
        if self.episodes < 0 or self.horizon < 1 or self.max_evals < 1:
            raise ValueError("graph.rl needs episodes >= 0, horizon >= 1 and max_evals >= 1")


@dataclass(frozen=True)
class MdnRnnConfig:
    """The world model's network (RLFlow's MDN-RNN over a graph encoder's latents) and how it
    is fitted to logged real transitions."""

    hidden: int = 32
    """width of the world model's own graph encoder and of its action embedding"""
    layers: int = 2
    """message-passing steps of that encoder"""
    latent: int = 16
    """size of a graph's latent vector (RLFlow's: 32)"""
    recurrent: int = 64
    """size of the GRU's state carried through an episode (RLFlow's LSTM: 256)"""
    mixtures: int = 4
    """Gaussians in the mixture over the next graph's latent (RLFlow's: 8)"""
    min_log_std: float = -3.0
    """floor of a Gaussian's log standard deviation, so that the likelihood stays bounded"""
    reward_scale: float = 10.0
    """the reward head predicts rewards divided by this (X-RLflow's rewards reach tens)"""
    latent_coef: float = 1.0
    """weight of the next-latent loss (the negative log-likelihood per latent dim)"""
    done_coef: float = 1.0
    """weight of the episode-end loss (binary cross-entropy)"""
    learning_rate: float = 3e-3
    """Adam's step size"""
    epochs: int = 30
    """passes over all logged real episodes at each refit (the weights are kept between)"""
    minibatch_episodes: int = 8
    """episodes per gradient step"""
    max_grad_norm: float = 1.0
    """the gradients' norm is clipped to this"""


@dataclass(frozen=True)
class WorldModelConfig:
    """The world-model graph search (RLFlow): real episodes log transitions and costs, the
    MDN-RNN is refitted on them, and the controller (the graph policy) is trained by PPO on
    episodes whose rewards the model predicts; round after round, within a budget of real
    cost estimates."""

    max_evals: int = 40
    """real cost estimates at most (distinct graphs costed, the start included): no real step
    that needs another is taken"""
    rounds: int = 6
    """rounds of (real episodes, refit, dream training) at most"""
    real_episodes: int = 2
    """episodes played in the real environment per round, logging transitions for the model"""
    dream_episodes: int = 24
    """episodes the controller plays in the model per round (a PPO update after every
    `ppo.episodes_per_update`)"""
    explore: float = 0.25
    """the chance that a step of a real episode (not the last, greedy one) takes a uniformly
    random rewrite instead of the controller's choice: a controller trained in a model fitted
    on few transitions can learn to stop at once, and then logs nothing new"""
    horizon: int = 6
    """rewrites at most per episode"""
    max_actions: int = 200
    """rewrites offered per step at most"""
    pretrained: str = "fresh"
    """the world model and controller to start from: fresh (learned on the model's graph
    alone), shipped (harl/data/graph_worldmodel.npz and graph_worldmodel_controller.npz where
    present, else fresh), or the path of a world model .npz written by
    tools/train_graph_worldmodel.py (its controller beside it, NAME_controller.npz); the pair
    is then fine-tuned on the model's graph. A loaded pair keeps its own networks' sizes and
    the model its own fitting settings"""
    seed: int = 0
    """seed of the controller's and the model's weights and of the action sampling"""
    model: MdnRnnConfig = field(default_factory=MdnRnnConfig)
    """the world model's network and fitting"""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """the controller's network and PPO"""

    def __post_init__(self) -> None:
        if self.max_evals < 1 or self.rounds < 1 or self.horizon < 1 or self.real_episodes < 1:
            raise ValueError("graph.worldmodel needs max_evals, rounds, real_episodes and "
                             "horizon >= 1")
        if self.dream_episodes < 0 or not 0.0 <= self.explore <= 1.0:
            raise ValueError("graph.worldmodel needs dream_episodes >= 0 and explore in [0, 1]")


@dataclass(frozen=True)
class GoConfig:
    """The GO graph search: one policy decides, for every rule match of the graph at once,
    whether to take it; a pass applies the taken matches and prices the graph once. Zero-shot
    from a policy trained across a corpus of graphs (tools/train_graph_go.py), optionally
    fine-tuned with PPO on the model's graph."""

    passes: int = 3
    """passes at most per episode (each one decision over every current match, its taken
    matches applied, the graph priced once); an episode ends earlier when nothing is taken
    or no match is left"""
    max_evals: int = 30
    """real cost estimates at most (distinct graphs costed, the start included): a pass whose
    graph would need another ends its episode unpriced"""
    finetune_episodes: int = 8
    """sampled episodes played on the model's graph after the zero-shot one, the policy
    updated by PPO after every `ppo.episodes_per_update` of them, then one more greedy
    episode (0: zero-shot only)"""
    max_actions: int = 400
    """matches decided per pass at most (the first ones in the graph's order)"""
    segment: int = 16
    """nodes per attention segment (in the graph's topological node order); each segment
    attends to itself and to the previous segment's output"""
    heads: int = 4
    """attention heads (they must divide `ppo.hidden`)"""
    node_decisions: bool = False
    """also decide, per node, a conv's blocked layout (kept NCHW, half the lanes) and a fusion
    fence after a conv or matmul (harl.graph.rules.NODE_RULES), beside the rule matches; the
    shipped policy was trained without them, so a search with them starts from a fresh one"""
    policy: str = "shipped"
    """the starting policy: shipped (harl/data/graph_go_policy.npz where present, else a fresh
    one), fresh (untrained: its greedy episode takes nothing), or the path of a policy .npz
    written by tools/train_graph_go.py"""
    seed: int = 0
    """seed of a fresh policy's weights and of the take/skip sampling"""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO's hyperparameters for fine-tuning (a loaded policy keeps its own width, depth,
    segment and heads)"""

    def __post_init__(self) -> None:
        if self.passes < 1 or self.max_evals < 1 or self.max_actions < 1 or self.segment < 1:
            raise ValueError("graph.go needs passes, max_evals, max_actions and segment >= 1")
        if self.finetune_episodes < 0 or self.heads < 1 or self.ppo.hidden % self.heads:
            raise ValueError("graph.go needs finetune_episodes >= 0 and heads >= 1 dividing "
                             "ppo.hidden")
