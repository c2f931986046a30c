"""Saving the graph level's networks (the `rl` and `go` policies, RLFlow's world model) in
formats that execute nothing on load: the weights in an .npz read with `allow_pickle=False`,
the shapes that rebuild the network and what it was trained on in a JSON file beside it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from harl.agents.checkpoint import load_arrays, save_arrays, save_json
from harl.graph.rl.config import PPOConfig

Network = TypeVar("Network", bound=nn.Module)


def save_network(path: Path, network: nn.Module, manifest: dict) -> None:
    """`path` (.npz) holds `network`'s weights, `path` with .json `manifest`."""
    path = Path(path)
    save_arrays(path, {k: v.detach().numpy().copy() for k, v in network.state_dict().items()})
    save_json(path.with_suffix(".json"), manifest)


def load_network(path: Path, build: Callable[[dict], Network]) -> tuple[Network, dict]:
    """The network `build(manifest)` makes, with the weights saved at `path`, and the
    manifest."""
    path = Path(path)
    manifest = json.loads(path.with_suffix(".json").read_text())
    network = build(manifest)
    network.load_state_dict({k: torch.from_numpy(np.array(v))
                             for k, v in load_arrays(path).items()})
    return network, manifest


def save_policy(path: Path, policy: nn.Module, *, config: PPOConfig, node_dim: int,
                edge_dim: int, rule_names: tuple[str, ...],
                manifest: dict | None = None) -> None:
    """A graph policy (`GraphPolicy` or `GoPolicy`) with the shapes, the PPO config, the
    rules, the fields its class names in `SHAPE_FIELDS` and `manifest`'s fields (what it was
    trained on)."""
    save_network(path, policy, {
        **(manifest or {}), "config": asdict(config), "node_dim": node_dim,
        "edge_dim": edge_dim, "rules": list(rule_names),
        **{name: getattr(policy, name) for name in policy.SHAPE_FIELDS}})


def load_policy(path: Path, policy_class: type[Network]) -> tuple[Network, PPOConfig, dict]:
    """The `policy_class` policy saved at `path` by `save_policy`, its config and its
    manifest."""
    def build(manifest: dict) -> Network:
        config = manifest["config"]
        return policy_class(node_dim=manifest["node_dim"], edge_dim=manifest["edge_dim"],
                            rules=len(manifest["rules"]), hidden=config["hidden"],
                            layers=config["layers"],
                            **{name: manifest[name] for name in policy_class.SHAPE_FIELDS})

    policy, manifest = load_network(path, build)
    return policy, PPOConfig(**manifest["config"]), manifest
