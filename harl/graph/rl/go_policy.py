"""GO's policy (Zhou et al., "Transferable Graph Optimizers for ML Compilers", NeurIPS'20) on
harl's rewrite graphs: one forward pass decides, for every rule match of a graph at once,
whether to take it.

The nodes are embedded by the GraphSAGE-style `Encoder` of the `rl` agent, then read in the
graph's node order (a Relax graph's is topological: parameters, then bindings) in segments of
`segment` nodes; each segment attends to the previous segment's output, detached (a memory, as
in Transformer-XL), and to itself, so that a decision sees nodes far along the graph without
attention over the whole of it. Each match gets a Bernoulli logit from the mean of its bound
nodes' attended embeddings, the graph's embedding and its rule's embedding. The critic has an
encoder of its own (as `GraphPolicy`'s). An observation's log-probability is the sum of its
matches' Bernoulli log-probabilities. The decisions are rule matches only: GO's per-node
layout, fusion and placement decisions are not made here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from harl.graph.rl.config import PPOConfig
from harl.graph.rl.env import Observation
from harl.graph.rl.policy import Encoder, GraphBatch, _mlp, batch_observations, segment_mean


class Decision(NamedTuple):
    """A policy's take/skip for every match of one observation."""

    take: np.ndarray
    """(actions,) bool: take each of the observation's actions, in its order"""
    logprob: float
    """the sum of the matches' Bernoulli log-probabilities of this decision"""
    value: float
    """the critic's value of the observation"""


class SegmentAttention(nn.Module):
    """Attention over node embeddings in their graph's order, `segment` nodes at a time: each
    segment's nodes attend to the previous segment's output (detached) and to the segment
    itself, then a residual feed-forward layer; graphs of a batch are attended separately and
    one shorter than a segment is one segment."""

    def __init__(self, hidden: int, *, heads: int, segment: int) -> None:
        super().__init__()
        self.segment = segment
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm = nn.LayerNorm(hidden)
        self.feed_forward = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.ReLU(),
                                          nn.Linear(2 * hidden, hidden))
        self.norm_out = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, node_graph: torch.Tensor, graphs: int) -> torch.Tensor:
        """`h` (nodes, hidden), the nodes of each graph contiguous and in order (as
        `batch_observations` stacks them), `node_graph` their graph: the attended embeddings."""
        count = torch.bincount(node_graph, minlength=graphs)
        first = torch.cumsum(count, 0) - count
        position = torch.arange(len(h)) - first[node_graph]
        seg, slot = position // self.segment, position % self.segment
        segments = int(seg.max()) + 1 if len(h) else 0
        padded = h.new_zeros((graphs, segments, self.segment, h.shape[1]))
        padded[node_graph, seg, slot] = h
        valid = torch.zeros((graphs, segments, self.segment), dtype=torch.bool)
        valid[node_graph, seg, slot] = True
        out = torch.zeros_like(padded)
        memory = h.new_zeros((graphs, self.segment, h.shape[1]))
        memory_valid = torch.zeros((graphs, self.segment), dtype=torch.bool)
        for k in range(segments):
            live = valid[:, k].any(1)  # graphs with nodes in this segment
            query, mine = padded[live, k], valid[live, k]
            keys = torch.cat([memory[live].detach(), query], dim=1)
            ignore = ~torch.cat([memory_valid[live], mine], dim=1)
            attended, _ = self.attention(query, keys, keys, key_padding_mask=ignore,
                                         need_weights=False)
            x = self.norm(query + attended)
            x = self.norm_out(x + self.feed_forward(x))
            rows = live.nonzero().squeeze(1)
            out = out.index_put((rows, torch.full_like(rows, k)), x)
            memory = memory.index_put((rows,), x)
            memory_valid = memory_valid.index_put((rows,), mine)
        return out[node_graph, seg, slot]


class GoPolicy(nn.Module):
    """The actor (encoder, segment attention, a Bernoulli head per match) and the critic (an
    encoder of its own and a value head)."""

    SHAPE_FIELDS: tuple[str, ...] = ("heads", "segment")  # constructor fields saved too

    def __init__(self, *, node_dim: int, edge_dim: int, rules: int, hidden: int = 64,
                 layers: int = 3, heads: int = 4, segment: int = 16,
                 take_prior: float = 0.5) -> None:
        super().__init__()
        self.rules = rules
        self.heads = heads
        self.segment = segment
        self.encoder = Encoder(node_dim=node_dim, edge_dim=edge_dim, hidden=hidden,
                               layers=layers)
        self.attention = SegmentAttention(hidden, heads=heads, segment=segment)
        self.rule_embed = nn.Embedding(rules, hidden)
        self.take_head = _mlp(4 * hidden, hidden, 1)
        self.critic_encoder = Encoder(node_dim=node_dim, edge_dim=edge_dim, hidden=hidden,
                                      layers=layers)
        self.value_head = _mlp(2 * hidden, hidden, 1)
        nn.init.zeros_(self.take_head[-1].weight)  # start at p = take_prior for every match
        nn.init.constant_(self.take_head[-1].bias, math.log(take_prior / (1.0 - take_prior)))

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(the actor's parameters, the critic's): PPO clips their gradients apart."""
        critic = [*self.critic_encoder.parameters(), *self.value_head.parameters()]
        ids = {id(p) for p in critic}
        return [p for p in self.parameters() if id(p) not in ids], critic

    def forward(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(take logits (actions,), values (graphs,))."""
        graphs = len(batch.rule_mask)
        h, g = self.encoder(batch)
        attended = self.attention(h, batch.node_graph, graphs)
        bound = segment_mean(attended[batch.bind_node], batch.bind_action,
                             len(batch.action_rule))
        take_in = torch.cat([bound, g[batch.action_graph], self.rule_embed(batch.action_rule)],
                            dim=1)
        logits = self.take_head(take_in).squeeze(1)
        values = self.value_head(self.critic_encoder(batch)[1]).squeeze(1)
        return logits, values

    def evaluate(self, batch: GraphBatch, taken: torch.Tensor):
        """Per observation: the log-prob of the decision `taken` ((graphs, longest) bool, row
        i the take mask of observation i's actions, padded), the entropy of its decisions (the
        sum of the matches' Bernoulli entropies) and the value."""
        logits, values = self(batch)
        graphs = len(values)
        within = torch.arange(len(logits)) - batch.action_offset[batch.action_graph]
        take = taken[batch.action_graph, within].to(logits.dtype)
        # log p(take) = take * logsigmoid(l) + (1 - take) * logsigmoid(-l)
        logp_each = take * nn.functional.logsigmoid(logits) + (1 - take) * (
            nn.functional.logsigmoid(-logits))
        p = torch.sigmoid(logits)
        entropy_each = -(p * nn.functional.logsigmoid(logits)
                         + (1 - p) * nn.functional.logsigmoid(-logits))
        logp = values.new_zeros(graphs).index_add_(0, batch.action_graph, logp_each)
        entropy = values.new_zeros(graphs).index_add_(0, batch.action_graph, entropy_each)
        return logp, entropy, values

    @torch.no_grad()
    def decide(self, obs: Observation, *, greedy: bool = False,
               generator: torch.Generator | None = None) -> Decision:
        """A take/skip for every action of `obs`: sampled, or each taken where its probability
        is above one half with `greedy`."""
        batch = batch_observations([obs], self.rules)
        logits, values = self(batch)
        p = torch.sigmoid(logits)
        take = p > 0.5 if greedy else torch.rand(len(p), generator=generator) < p
        logp = torch.where(take, nn.functional.logsigmoid(logits),
                           nn.functional.logsigmoid(-logits)).sum()
        return Decision(take.numpy().copy(), float(logp), float(values[0]))

    def act(self, obs: Observation, *, generator: torch.Generator | None = None,
            greedy: bool = False) -> Decision:
        """`decide`, under the name `harl.graph.rl.ppo.Trainer` plays an episode with."""
        return self.decide(obs, greedy=greedy, generator=generator)


def restrict_rules(policy: GoPolicy, trained: Sequence[str], wanted: Sequence[str]) -> GoPolicy:
    """`policy`, trained over the rules named `trained`, over `wanted` (a subset, in its own
    order): their rule embeddings kept, the others dropped. A search that leaves out some rules
    (the layout rules beside blocked convs) uses a policy trained on all of them."""
    rows = torch.tensor([list(trained).index(name) for name in wanted], dtype=torch.long)
    policy.rule_embed = nn.Embedding.from_pretrained(
        policy.rule_embed.weight.detach()[rows].clone(), freeze=False)
    policy.rules = len(wanted)
    return policy


# --- a fresh policy (saved and loaded by harl.graph.rl.saving) ------------------------------------


def make_go_policy(*, node_dim: int, edge_dim: int, rules: int, config: PPOConfig,
                   heads: int, segment: int, seed: int = 0, take_prior: float = 0.5) -> GoPolicy:
    """A fresh policy, its weights drawn from `seed`, every match taken with probability
    `take_prior` until it learns."""
    torch.manual_seed(seed)
    return GoPolicy(node_dim=node_dim, edge_dim=edge_dim, rules=rules, hidden=config.hidden,
                    layers=config.layers, heads=heads, segment=segment, take_prior=take_prior)
