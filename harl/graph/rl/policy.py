"""The graph agent's network: a GraphSAGE-style encoder, X-RLflow's hierarchical action heads
(a rule, then one of its matches) and a value head, in plain torch.

Observations are batched as one disjoint graph (`GraphBatch`): node features stacked, edges
offset, each node tagged with its graph. The encoder's layers add to each node the mean message
from its producers and the mean from its users (each message made from the neighbour and the
edge's features), with a residual; the graph's embedding is the mean and max of its nodes. The
rule head scores every rule and stop from the graph embedding; a rule without a match is
masked. The match head scores each match from the mean embedding of the nodes it binds, the
graph embedding and its rule; matches compete within their rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from harl.graph.rl.env import Observation


class GraphBatch(NamedTuple):
    """Observations as one disjoint graph."""

    x: torch.Tensor  # (nodes, node_dim)
    src: torch.Tensor  # (edges,)
    dst: torch.Tensor  # (edges,)
    edge_x: torch.Tensor  # (edges, edge_dim)
    node_graph: torch.Tensor  # (nodes,) which observation a node is in
    action_graph: torch.Tensor  # (actions,) which observation an action is in
    action_rule: torch.Tensor  # (actions,)
    bind_action: torch.Tensor  # (bindings,) an action ...
    bind_node: torch.Tensor  # (bindings,) ... and a node it binds
    rule_mask: torch.Tensor  # (graphs, rules + 1) bool; the last column is stop
    action_offset: torch.Tensor  # (graphs,) the first action of each observation


def batch_observations(observations: Sequence[Observation], rules: int) -> GraphBatch:
    """Stack `observations` (each over `rules` rules) into one `GraphBatch`."""
    xs, src, dst, edge_x, node_graph = [], [], [], [], []
    action_graph, action_rule, bind_action, bind_node, offsets = [], [], [], [], []
    mask = np.zeros((len(observations), rules + 1), dtype=bool)
    mask[:, rules] = True
    nodes = actions = 0
    for g, obs in enumerate(observations):
        xs.append(obs.nodes)
        src.append(obs.edge_links[:, 0] + nodes)
        dst.append(obs.edge_links[:, 1] + nodes)
        edge_x.append(obs.edge_features)
        node_graph.append(np.full(len(obs.nodes), g))
        offsets.append(actions)
        for action in obs.actions:
            action_graph.append(g)
            action_rule.append(action.rule)
            mask[g, action.rule] = True
            bound = action.nodes or tuple(range(len(obs.nodes)))  # none named: the whole graph
            bind_action.extend([actions] * len(bound))
            bind_node.extend(n + nodes for n in bound)
            actions += 1
        nodes += len(obs.nodes)

    def long(values) -> torch.Tensor:
        return torch.as_tensor(np.asarray(values, dtype=np.int64).reshape(-1))

    return GraphBatch(
        x=torch.from_numpy(np.concatenate(xs).astype(np.float32)),
        src=long(np.concatenate(src)), dst=long(np.concatenate(dst)),
        edge_x=torch.from_numpy(np.concatenate(edge_x).astype(np.float32)),
        node_graph=long(np.concatenate(node_graph)), action_graph=long(action_graph),
        action_rule=long(action_rule), bind_action=long(bind_action), bind_node=long(bind_node),
        rule_mask=torch.from_numpy(mask), action_offset=long(offsets))


def segment_mean(values: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
    """Mean of `values` rows per `index` (0 where a segment is empty)."""
    out = values.new_zeros((count, values.shape[1])).index_add_(0, index, values)
    n = values.new_zeros(count).index_add_(0, index, values.new_ones(len(index)))
    return out / n.clamp(min=1.0)[:, None]


def segment_log_softmax(logits: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
    """log_softmax of `logits` within each segment of `index`."""
    top = logits.new_full((count,), -torch.inf).scatter_reduce(
        0, index, logits.detach(), reduce="amax", include_self=True)
    shifted = logits - top[index]
    total = logits.new_zeros(count).index_add_(0, index, shifted.exp())
    return shifted - total.log()[index]


class SageLayer(nn.Module):
    """One message-passing step: messages from producers and from users, meaned, added."""

    def __init__(self, hidden: int, edge_dim: int) -> None:
        super().__init__()
        self.self_ = nn.Linear(hidden, hidden)
        self.from_producers = nn.Linear(hidden + edge_dim, hidden)
        self.from_users = nn.Linear(hidden + edge_dim, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: torch.Tensor, batch: GraphBatch) -> torch.Tensor:
        count = len(h)
        down = self.from_producers(torch.cat([h[batch.src], batch.edge_x], dim=1))
        up = self.from_users(torch.cat([h[batch.dst], batch.edge_x], dim=1))
        message = segment_mean(down, batch.dst, count) + segment_mean(up, batch.src, count)
        return h + torch.relu(self.norm(self.self_(h) + message))


def _mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))


class Encoder(nn.Module):
    """Node embeddings after `layers` message-passing steps, and each graph's embedding (the
    mean and max of its nodes)."""

    def __init__(self, *, node_dim: int, edge_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Linear(node_dim, hidden)
        self.layers = nn.ModuleList(SageLayer(hidden, edge_dim) for _ in range(layers))

    def forward(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        graphs = len(batch.rule_mask)
        h = torch.relu(self.embed(batch.x))
        for layer in self.layers:
            h = layer(h, batch)
        pooled_max = h.new_full((graphs, h.shape[1]), -torch.inf).scatter_reduce(
            0, batch.node_graph[:, None].expand_as(h), h, reduce="amax", include_self=True)
        return h, torch.cat([segment_mean(h, batch.node_graph, graphs), pooled_max], dim=1)


class GraphPolicy(nn.Module):
    """The actor (encoder, rule head over rules + stop, match head) and the critic (an encoder
    of its own and a value head: as in CleanRL's ppo.py, the value loss, large at X-RLflow's
    reward scale, does not pull on the actor's embeddings)."""

    SHAPE_FIELDS: tuple[str, ...] = ()  # constructor fields saved beside the shapes and config

    def __init__(self, *, node_dim: int, edge_dim: int, rules: int, hidden: int = 64,
                 layers: int = 3) -> None:
        super().__init__()
        self.rules = rules
        self.encoder = Encoder(node_dim=node_dim, edge_dim=edge_dim, hidden=hidden,
                               layers=layers)
        self.rule_head = _mlp(2 * hidden, hidden, rules + 1)
        self.rule_embed = nn.Embedding(rules, hidden)
        self.match_head = _mlp(4 * hidden, hidden, 1)
        self.critic_encoder = Encoder(node_dim=node_dim, edge_dim=edge_dim, hidden=hidden,
                                      layers=layers)
        self.value_head = _mlp(2 * hidden, hidden, 1)
        for head in (self.rule_head, self.match_head):  # start near uniform
            nn.init.zeros_(head[-1].weight)
            nn.init.zeros_(head[-1].bias)

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(the actor's parameters, the critic's)."""
        critic = [*self.critic_encoder.parameters(), *self.value_head.parameters()]
        ids = {id(p) for p in critic}
        return [p for p in self.parameters() if id(p) not in ids], critic

    def forward(self, batch: GraphBatch):
        """(rule log-probs (graphs, rules + 1), match log-probs within their rule (actions,),
        values (graphs,))."""
        graphs = len(batch.rule_mask)
        h, g = self.encoder(batch)
        rule_logits = self.rule_head(g).masked_fill(~batch.rule_mask, -torch.inf)
        rule_logp = torch.log_softmax(rule_logits, dim=1)
        bound = segment_mean(h[batch.bind_node], batch.bind_action, len(batch.action_rule))
        match_in = torch.cat([bound, g[batch.action_graph], self.rule_embed(batch.action_rule)],
                             dim=1)
        match_logits = self.match_head(match_in).squeeze(1)
        group = batch.action_graph * (self.rules + 1) + batch.action_rule
        match_logp = segment_log_softmax(match_logits, group, graphs * (self.rules + 1))
        values = self.value_head(self.critic_encoder(batch)[1]).squeeze(1)
        return rule_logp, match_logp, values

    def evaluate(self, batch: GraphBatch, taken: torch.Tensor):
        """Log-probs of the `taken` actions (an index into each observation's actions, its
        action count for stop), the policy's entropy (the rule's, plus each rule's matches'
        weighted by the rule's probability), and the values."""
        rule_logp, match_logp, values = self(batch)
        graphs = len(rule_logp)
        stop = taken >= torch.bincount(batch.action_graph, minlength=graphs)
        rule = torch.full_like(taken, self.rules)
        logp_match = torch.zeros_like(values)
        if len(match_logp):
            flat = (batch.action_offset + taken).clamp(max=len(match_logp) - 1)
            rule = torch.where(stop, rule, batch.action_rule[flat])
            logp_match = torch.where(stop, logp_match, match_logp[flat])
        logp = rule_logp.gather(1, rule[:, None]).squeeze(1) + logp_match
        p_rule = rule_logp.exp()
        entropy = -(p_rule * rule_logp.nan_to_num(neginf=0.0)).sum(1)
        if len(match_logp):
            group = batch.action_graph * (self.rules + 1) + batch.action_rule
            per_rule = rule_logp.new_zeros(graphs * (self.rules + 1)).index_add_(
                0, group, -(match_logp.exp() * match_logp)).view(graphs, self.rules + 1)
            entropy = entropy + (p_rule * per_rule).sum(1)
        return logp, entropy, values

    @torch.no_grad()
    def act(self, obs: Observation, *, generator: torch.Generator | None = None,
            greedy: bool = False) -> tuple[int, float, float]:
        """(an action index for `obs`, its log-prob, the state's value): sampled, or the most
        likely rule and its most likely match with `greedy`."""
        batch = batch_observations([obs], self.rules)
        rule_logp, match_logp, values = self(batch)
        probs = rule_logp[0].exp()
        rule = int(probs.argmax()) if greedy else int(torch.multinomial(probs, 1,
                                                                         generator=generator))
        if rule == self.rules:
            return len(obs.actions), float(rule_logp[0, rule]), float(values[0])
        mine = (batch.action_rule == rule).nonzero().squeeze(1)
        within = match_logp[mine].exp()
        pick = int(within.argmax()) if greedy else int(torch.multinomial(within, 1,
                                                                          generator=generator))
        index = int(mine[pick])
        return index, float(rule_logp[0, rule] + match_logp[index]), float(values[0])
