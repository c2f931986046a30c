"""The e-graph search's settings, apart from the search so that reading a config needs no egglog."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EqsatConfig:
    """Limits and settings of the e-graph search (defaults fit 2 cores and a few GB)."""

    node_limit: int = 3000
    """the e-graph stops growing at this many term e-nodes"""
    iterations: int = 40
    """MCTS iterations (each expands one rewrite and runs one rollout)"""
    time_limit_s: float = 120.0
    """wall-clock limit of the tree search, extraction excluded"""
    exploration: float = 0.5
    """UCT exploration constant (rewards, relative cost drops, are divided by the largest
    seen so far)"""
    rollout_depth: int = 2
    """random rewrites applied after each expansion to estimate its value"""
    max_children: int = 24
    """at most this many rewrites (sampled) are tried from one tree node"""
    ilp_time_limit_s: float = 20.0
    """time limit of the ILP extraction; the tree extraction stands in when it runs out"""
    ilp_solutions: int = 3
    """the ILP's best few terms (by local cost) that are ranked by the real cost"""
    seed: int = 0
    """seed of the action sampling and rollouts"""
