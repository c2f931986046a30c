"""Equality saturation guided by Monte Carlo tree search, after Hartmann et al. (PACT'24).

The e-graph is egglog's; harl's Relax rules grow it. A search-tree node is a graph reached
by a sequence of rewrites from the original; expanding it applies one more rule at one match,
encodes the result as terms (`harl.graph.search.term`) and unions its output with the
original's, so that equal subterms of every graph found share e-classes. UCT chooses which
node to expand; a rollout applies a few random rewrites more, and the reward is the drop of
the best cost seen, relative to the original's. The e-graph stops growing at an e-node
limit, the search at an iteration or time limit. The final graph is extracted from the
e-graph by an ILP that pays shared subterms once (per-node costs: each call priced as a task
on its own), with the per-class tree extraction as well; both, the best graph the tree
search saw and the original are then ranked by the real cost (fusion is not local).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from harl.graph.rule import Rule
from harl.graph.search.common import Cost, CostMemo, actions, cheaper, first_line, try_apply
from harl.graph.search.eqsat_config import EqsatConfig
from harl.graph.search.extract import ilp_extract_top, read_egraph, tree_extract
from harl.graph.search.term import TermTable

log = logging.getLogger(__name__)


@dataclass
class EqsatResult:
    """The chosen graph and how it was found."""

    mod: object
    cost: float
    initial_cost: float
    source: str
    """which candidate won: 'ilp', 'ilp2', ... (the ILP's terms by local cost), 'tree'
    (extractions), 'mcts' (a graph the tree search reached) or 'original'"""
    applied: list[str]
    """the rewrites leading to the chosen graph, where it is one the search reached"""
    candidates: dict[str, float] = field(default_factory=dict)
    """each candidate's cost"""
    candidate_mods: dict[str, object] = field(default_factory=dict)
    """each candidate's graph"""
    enodes: int = 0
    eclasses: int = 0
    graphs: int = 0
    """graphs inserted into the e-graph (the original included)"""
    iterations: int = 0
    evals: int = 0
    seconds: float = 0.0


_WHOLE_GRAPH = frozenset({"convert_layout_nhwc"})
"""rules that rewrite the whole graph through a TVM pass, which may give a matched variable's
name to another value: only their outputs are unioned"""


def _types(mod) -> dict[str, object]:
    return {b.var.name: b.var.ty for block in mod["main"].body.blocks for b in block.bindings}


class _TreeNode:
    def __init__(self, mod, path: list[str], parent: _TreeNode | None, refs: dict):
        self.mod, self.path, self.parent, self.refs = mod, path, parent, refs
        self.untried: list | None = None
        self.children: list[_TreeNode] = []
        self.visits, self.value = 0, 0.0

    def uct(self, c: float, scale: float) -> float:
        return (self.value / self.visits / scale
                + c * math.sqrt(math.log(self.parent.visits + 1) / self.visits))


class _Search:
    def __init__(self, mod, cost: Cost, rules: Sequence[Rule], config: EqsatConfig):
        from egglog import EGraph

        self.mod, self.rules, self.config = mod, rules, config
        self.memo, self.rng = CostMemo(cost), random.Random(config.seed)
        self.egraph, self.table = EGraph(), TermTable()
        root_term, self.root_refs = self.table.insert(self.egraph, mod)
        self.root_term = self.egraph.let("root", root_term)
        self.graphs, self.enodes = 1, len(read_egraph(self.egraph).nodes)
        self.initial = self.memo(mod)
        self.best = (self.initial, mod, [])
        self.reward_scale = 1e-9  # the largest reward so far: UCT sees rewards in [-1, 1]
        self.paths: dict[int, list[str]] = {self._hash(mod): []}

    @staticmethod
    def _hash(mod) -> int:
        import tvm_ffi

        return tvm_ffi.structural_hash(mod["main"], map_free_vars=True)

    def _seen(self, mod, path: list[str]) -> float:
        value = self.memo(mod)
        self.paths.setdefault(self._hash(mod), path)
        if cheaper(value, self.best[0]):
            self.best = (value, mod, path)
        return value

    def _insert(self, parent: _TreeNode, rule: Rule, match, mod) -> dict | None:
        """Add `mod` (`parent`'s graph rewritten by `rule` at `match`) to the e-graph: its
        output is unioned with the original's, and each rewritten variable that keeps its
        type with its old value (the rest of the graph still reads it, so its value is
        unchanged). Returns the variables' terms, or None (one warning) if the graph cannot
        be encoded."""
        import tvm_ffi
        from egglog import union

        try:
            term, refs = self.table.insert(self.egraph, mod)
            unions = [union(self.root_term).with_(term)]
            if rule.name not in _WHOLE_GRAPH:
                old, new = _types(parent.mod), _types(mod)
                unions += [union(parent.refs[v]).with_(refs[v]) for v in match.vars
                           if v in parent.refs and v in refs
                           and tvm_ffi.structural_equal(old[v], new[v])]
            self.egraph.register(*unions)
            self.egraph.run(1)
        except Exception as err:  # noqa: BLE001  (an unencodable graph is skipped)
            log.warning("e-graph: a rewritten graph could not be encoded (%s); skipped",
                        first_line(err))
            return None
        self.graphs += 1
        self.enodes = len(read_egraph(self.egraph).nodes)
        return refs

    def _expand(self, node: _TreeNode) -> _TreeNode | None:
        if node.untried is None:
            found = actions(node.mod, self.rules)
            self.rng.shuffle(found)
            node.untried = found[: self.config.max_children]
        while node.untried:
            rule, match = node.untried.pop()
            new = try_apply(rule, match, node.mod)
            refs = None if new is None else self._insert(node, rule, match, new)
            if refs is not None:
                child = _TreeNode(new, node.path + [str(match)], node, refs)
                node.children.append(child)
                return child
        return None

    def _rollout(self, node: _TreeNode) -> float:
        mod, path = node.mod, list(node.path)
        best = self._seen(mod, path)
        for _ in range(self.config.rollout_depth):
            found = actions(mod, self.rules)
            if not found:
                break
            rule, match = self.rng.choice(found)
            new = try_apply(rule, match, mod)
            if new is None:
                continue
            mod, path = new, path + [str(match)]
            best = min(best, self._seen(mod, path))
        return (self.initial - best) / self.initial if math.isfinite(best) else -1.0

    def run(self) -> int:
        """The tree search; returns the number of iterations run."""
        config, root = self.config, _TreeNode(self.mod, [], None, self.root_refs)
        start = time.perf_counter()
        for iteration in range(config.iterations):
            if (time.perf_counter() - start > config.time_limit_s
                    or self.enodes >= config.node_limit):
                return iteration
            node = root
            while node.untried is not None and not node.untried and node.children:
                node = max(node.children,
                           key=lambda n: n.uct(config.exploration, self.reward_scale))
            child = self._expand(node) or node
            reward = self._rollout(child)
            self.reward_scale = max(self.reward_scale, abs(reward))
            while child is not None:
                child.visits += 1
                child.value += reward
                child = child.parent
        return config.iterations

    def extract(self) -> dict[str, tuple[float, object]]:
        """The candidates: ILP and tree extractions of the e-graph, the best graph reached,
        the original; each with its real cost."""
        graph = read_egraph(self.egraph)
        self.eclasses = graph.classes
        found = {"mcts": self.best[:2], "original": (self.initial, self.mod)}
        cost = self.table.local_cost
        top = ilp_extract_top(graph, cost, count=self.config.ilp_solutions,
                              time_limit_s=self.config.ilp_time_limit_s)
        choices = {("ilp" if k == 0 else f"ilp{k + 1}"): choice for k, choice in enumerate(top)}
        try:
            choices["tree"] = tree_extract(graph, cost)
        except ValueError as err:
            log.warning("tree extraction failed (%s)", err)
        for name, choice in choices.items():
            if choice is None:
                continue
            try:
                mod = self.table.rebuild(self.mod, graph.root, choice)
            except Exception as err:  # noqa: BLE001  (a graph that does not rebuild is dropped)
                log.warning("the %s-extracted graph does not rebuild (%s); dropped", name,
                            first_line(err))
                continue
            found[name] = (self.memo(mod), mod)
        return found


def operator_changes(before, after) -> str:
    """How `after` differs from `before` in operator counts, e.g. "relax.nn.conv2d 57 -> 51,
    relax.split 0 -> 6": what an extracted graph that mixes rewrites applied."""
    from collections import Counter

    from tvm import relax

    from harl.graph.rule import Graph

    def counts(mod) -> Counter:
        return Counter(b.value.op.name for b in Graph(mod).bindings
                       if isinstance(b.value, relax.Call) and hasattr(b.value.op, "name"))

    old, new = counts(before), counts(after)
    changed = sorted(op for op in old.keys() | new.keys() if old[op] != new[op])
    described = ", ".join(f"{op} {old[op]} -> {new[op]}" for op in changed)
    return described or "operator counts unchanged"


def eqsat(mod, cost: Cost, *, rules: Sequence[Rule] | None = None,
          config: EqsatConfig | None = None) -> EqsatResult:
    """Grow an e-graph of `mod` with MCTS-chosen rewrites, extract, and return the graph of
    least `cost` among the extractions, the best graph reached and `mod` itself."""
    from harl.graph.rules import ALL_RULES

    start = time.perf_counter()
    try:
        search = _Search(mod, cost, ALL_RULES if rules is None else rules,
                         config or EqsatConfig())
    except Exception as err:  # noqa: BLE001  (the graph stands when it cannot be encoded)
        log.warning("e-graph: the graph cannot be encoded (%s); it stands", first_line(err))
        value = CostMemo(cost)(mod)
        return EqsatResult(mod, value, value, "original", [], {"original": value},
                           {"original": mod}, seconds=time.perf_counter() - start)
    iterations = search.run()
    found = search.extract()
    source = min(found, key=lambda k: (found[k][0], k != "original"))
    if not cheaper(found[source][0], found["original"][0]):
        source = "original"  # a tie, to the float's last bits, keeps the graph as it is
    value, chosen = found[source]
    applied = search.paths.get(search._hash(chosen))
    if source == "mcts":
        applied = search.best[2]
    return EqsatResult(
        chosen, value, search.initial, source,
        applied=(list(applied) if applied is not None
                 else [f"(extracted, a mix of rewrites: {operator_changes(mod, chosen)})"]),
        candidates={k: v[0] for k, v in found.items()},
        candidate_mods={k: v[1] for k, v in found.items()}, enodes=search.enodes,
        eclasses=search.eclasses, graphs=search.graphs, iterations=iterations,
        evals=search.memo.evals, seconds=time.perf_counter() - start)
