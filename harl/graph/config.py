"""How `python -m harl.tune --graph` searches the graph (the `[graph]` table of a config file)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harl.graph.rl.config import GoConfig, RlConfig, WorldModelConfig
from harl.graph.rules.nchwc import LAYOUTS
from harl.graph.search.eqsat_config import EqsatConfig

METHODS = ("off", "greedy", "eqsat", "rl", "worldmodel", "go")
"""graph searches: none, TASO-style greedy, equality saturation + MCTS, a PPO-trained graph
neural network policy (X-RLflow), that policy trained in a learned world model (RLFlow), a
policy deciding every rule match at once, trained across graphs (GO)"""


def _eqsat_config() -> EqsatConfig:
    """Limits that fit 2 cores: the e-graph search ends in about a minute on the examples."""
    return EqsatConfig(node_limit=2000, iterations=24, time_limit_s=60.0, ilp_time_limit_s=10.0)


@dataclass(frozen=True)
class GraphConfig:
    """The graph level: rewrite the imported graph before its tasks are tuned."""

    method: str = "off"
    """off | greedy | eqsat | rl | worldmodel | go: search the graph's rewrites before tuning
    (greedy: apply the best rewrite while the estimated latency drops; eqsat: equality
    saturation guided by MCTS; rl: a graph neural network policy, fine-tuned online with PPO;
    worldmodel: that policy trained with PPO in a world model fitted on few real estimates;
    go: a policy with segment attention that takes or skips every rule match in one pass,
    zero-shot from a policy trained across graphs, optionally fine-tuned with PPO)"""
    conv_layout: str = "nchwc"
    """nchwc | imported: on a CPU, compute 2-D convs (ungrouped and depthwise) in a blocked
    channel layout, NCHW{b}c with b the target's float32 vector lanes, carried from conv to
    conv (harl.graph.rules.nchwc), after the graph search of any method; imported: the layouts
    as imported (NCHW). Blocked, CNNs tuned to 0.68-0.86x of NCHW's latency at equal trials
    (docs/experiments.md); a GPU keeps its layouts. With nchwc the graph searches leave out
    the NHWC layout rules (harl.graph.rules.LAYOUT_RULES)"""
    retune_share: float = 0.25
    """the share of the trial budget kept for after the second search, which prices graphs with
    the latencies tuned so far; a changed graph's new tasks are tuned with it"""
    switch_gain: float = 0.05
    """the second search replaces the graph being tuned only by one estimated this much faster
    (relative): the trials spent on tasks the new graph drops are lost to it"""
    greedy_max_evals: int = 60
    """greedy: stop after costing this many distinct graphs"""
    measured_peak_floor: bool = True
    """an unmeasured task is priced no faster (in FLOP/s) than the fastest task the run has
    measured (harl.graph.cost.GraphCostModel.peak_gflops)"""
    cost_samples: int = 16
    """random schedules of an unmeasured task the cost model scores to estimate its latency
    (0: the roofline time alone; the second search then skips training a model on the run's
    records)"""
    cost_score_injective: bool = False
    """the cost model scores the sampled schedules of tasks without a reduction (element-wise,
    injective) too; false: they are priced by their roofline time alone (their scores swung
    estimates up to 20x the roofline where their FLOPs crossed the prior's floor, so one
    rewrite priced +36% to -185% by width; harl.graph.cost.GraphCostModel's
    `score_injective`)"""
    eqsat: EqsatConfig = field(default_factory=_eqsat_config)
    """eqsat: the e-graph's size, time and extraction limits"""
    rl: RlConfig = field(default_factory=RlConfig)
    """rl: episodes, horizon, cost budget and starting policy of the learned search"""
    worldmodel: WorldModelConfig = field(default_factory=WorldModelConfig)
    """worldmodel: real-estimate budget, rounds, dream episodes, the starting pair, the world
    model and PPO"""
    go: GoConfig = field(default_factory=GoConfig)
    """go: passes, real-estimate budget, fine-tuning episodes, attention and starting policy"""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"graph.method must be one of {', '.join(METHODS)}, "
                             f"not {self.method!r}")
        if self.conv_layout not in LAYOUTS:
            raise ValueError(f"graph.conv_layout must be one of {', '.join(LAYOUTS)}, "
                             f"not {self.conv_layout!r}")
        if not 0.0 <= self.retune_share < 1.0:
            raise ValueError(f"graph.retune_share must be in [0, 1), not {self.retune_share}")
