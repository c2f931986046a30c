"""Choosing one term per e-class from a serialised egglog e-graph.

`tree_extract` is the usual per-class choice (each class's cheapest node, counting every
child's cost as if it were not shared), which misses solutions where a subterm is computed
once and used twice. `ilp_extract` solves Tensat's integer program with `scipy.optimize.milp`:
a binary per node, the root class chosen, a chosen node's child classes chosen, and order
variables per class that rule out cycles; shared nodes are paid once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

Choice = dict[int, tuple[str, tuple[int, ...]]]
"""e-class -> (key, child e-classes) of the node chosen there"""


@dataclass(frozen=True)
class ENode:
    """One term node of the e-graph: its e-class, key and child e-classes."""

    cls: int
    key: str
    children: tuple[int, ...]


@dataclass
class SerializedGraph:
    """The term nodes of an e-graph, and the class of the term let-bound as the root."""

    nodes: list[ENode]
    root: int

    @property
    def classes(self) -> int:
        return len({n.cls for n in self.nodes})


def read_egraph(egraph, root_let: str = "root") -> SerializedGraph:
    """The term nodes of `egraph` (egglog's JSON serialisation), keys and children resolved."""
    data = json.loads(egraph._serialize().to_json())
    nodes, class_ids = data["nodes"], {}

    def cid(name: str) -> int:
        return class_ids.setdefault(name, len(class_ids))

    out, root = [], None
    for node in nodes.values():
        op = node["op"]
        if op not in ("Term.op", "Term.leaf"):
            continue
        key = json.loads(nodes[node["children"][0]]["op"])
        children: tuple[int, ...] = ()
        if op == "Term.op":
            vec = nodes[node["children"][1]]
            children = tuple(cid(nodes[c]["eclass"]) for c in vec["children"])
        out.append(ENode(cid(node["eclass"]), key, children))
    for name, info in data.get("class_data", {}).items():
        if f"${root_let}" in [s.strip() for s in info.get("let", "").split(",")]:
            root = cid(name)
    if root is None:
        raise ValueError(f"no e-class is let-bound as {root_let!r}")
    return SerializedGraph(out, root)


def _reachable(choice: Choice, root: int) -> Choice:
    seen: Choice = {}
    stack = [root]
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen[cls] = choice[cls]
        stack.extend(choice[cls][1])
    return seen


def dag_cost(choice: Choice, root: int, cost: Callable[[str], float]) -> float:
    """The cost of the chosen term with each shared subterm paid once."""
    return sum(cost(key) for key, _ in _reachable(choice, root).values())


def tree_extract(graph: SerializedGraph, cost: Callable[[str], float]) -> Choice:
    """Per e-class, the node of least tree cost (its cost plus its children's, shared
    children counted again), found by iterating to a fixed point."""
    best: dict[int, float] = {}
    pick: Choice = {}
    changed = True
    while changed:
        changed = False
        for node in graph.nodes:
            if any(c not in best for c in node.children):
                continue
            total = cost(node.key) + sum(best[c] for c in node.children)
            if total < best.get(node.cls, np.inf) - 1e-9:
                best[node.cls], pick[node.cls] = total, (node.key, node.children)
                changed = True
    if graph.root not in pick:
        raise ValueError("the root e-class has no finite term")
    return _reachable(pick, graph.root)


def ilp_extract(graph: SerializedGraph, cost: Callable[[str], float], *,
                time_limit_s: float = 20.0) -> Choice | None:
    """The term of least DAG cost, by an integer program (None when the solver finds no
    solution in time; the caller falls back to `tree_extract`)."""
    found = ilp_extract_top(graph, cost, count=1, time_limit_s=time_limit_s)
    return found[0] if found else None


def ilp_extract_top(graph: SerializedGraph, cost: Callable[[str], float], *, count: int = 3,
                    time_limit_s: float = 20.0) -> list[Choice]:
    """Up to `count` terms in order of DAG cost: the integer program solved again with each
    found term's node set forbidden (`time_limit_s` for all solves together)."""
    import time

    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix, lil_matrix

    nodes = graph.nodes
    n_nodes, n_cls = len(nodes), max(max(n.cls for n in nodes), graph.root) + 1
    members: dict[int, list[int]] = {}
    index: dict[tuple, int] = {}
    for i, node in enumerate(nodes):
        members.setdefault(node.cls, []).append(i)
        index[(node.cls, node.key, node.children)] = i
    edges = [(i, c) for i, node in enumerate(nodes) for c in set(node.children)]
    # variables: x (nodes, binary), then t (classes, order in [0, 1])
    n_var = n_nodes + n_cls
    rows = 1 + 2 * len(edges)
    a = lil_matrix((rows, n_var))
    lo, hi = np.full(rows, -np.inf), np.full(rows, np.inf)
    for i in members.get(graph.root, []):
        a[0, i] = 1.0
    lo[0] = 1.0
    eps, big = 1.0 / (n_cls + 1), 2.0
    for r, (i, c) in enumerate(edges, start=1):
        a[r, i] = 1.0  # x_i - sum(x in class c) <= 0
        for j in members.get(c, []):
            a[r, j] -= 1.0
        hi[r] = 0.0
        r2 = r + len(edges)  # t_cls(i) - t_c - big*x_i >= eps - big
        a[r2, n_nodes + nodes[i].cls] += 1.0
        a[r2, n_nodes + c] -= 1.0
        a[r2, i] -= big
        lo[r2] = eps - big
    ub = np.ones(n_var)
    for i, node in enumerate(nodes):
        if node.cls in node.children or any(c not in members for c in node.children):
            ub[i] = 0.0
    objective = np.concatenate([[cost(n.key) for n in nodes], np.zeros(n_cls)])
    integrality = np.concatenate([np.ones(n_nodes), np.zeros(n_cls)])
    constraints = [LinearConstraint(a.tocsr(), lo, hi)]
    found: list[Choice] = []
    deadline = time.perf_counter() + time_limit_s
    while len(found) < count and time.perf_counter() < deadline:
        result = milp(objective, constraints=constraints, integrality=integrality,
                      bounds=Bounds(np.zeros(n_var), ub),
                      options={"time_limit": max(deadline - time.perf_counter(), 0.1),
                               "disp": False})
        if result.x is None:
            if not found:
                log.warning("ILP extraction found no solution (%s); using tree extraction",
                            result.message)
            break
        chosen: Choice = {}
        for i in sorted(range(n_nodes), key=lambda i: cost(nodes[i].key)):
            if result.x[i] > 0.5 and nodes[i].cls not in chosen:
                chosen[nodes[i].cls] = (nodes[i].key, nodes[i].children)
        chosen = _reachable(chosen, graph.root)
        found.append(chosen)
        used = [index[(cls, key, children)] for cls, (key, children) in chosen.items()]
        cut = csr_matrix((np.ones(len(used)), (np.zeros(len(used)), used)), shape=(1, n_var))
        constraints.append(LinearConstraint(cut, -np.inf, len(used) - 1))  # not this one
    return found
