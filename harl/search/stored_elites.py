"""A resumed task's best measured states, read back from the tuning database per sketch."""

from __future__ import annotations

import numpy as np
from tvm.s_tir.schedule import Trace

from harl.agents.tile_tuner import State
from harl.search.trace_sites import state_of, structure_of


def stored_elites(database, mod, sketch_traces: list,
                  limit: int) -> dict[int, list[tuple[float, State]]]:
    """The database's best `limit` records of workload `mod`, as (mean latency, state) per
    sketch index, best first; empty where the database has not seen the workload.

    A record's trace is its sketch's instructions followed by what the postprocs added, so it
    belongs to the sketch whose structure is its longest matching prefix. Records that match no
    sketch, or have no run time, are left out.
    """
    if database is None or not sketch_traces or not database.has_workload(mod):
        return {}
    structures = [structure_of(trace.insts) for trace in sketch_traces]
    workload = database.commit_workload(mod)  # the stored one: nothing is written
    stored: dict[int, list[tuple[float, State]]] = {}
    for record in database.get_top_k(workload, limit):
        insts = list(record.trace.insts)
        names = structure_of(insts)
        matches = [i for i, s in enumerate(structures) if names[: len(s)] == s]
        if not matches or not record.run_secs:
            continue
        sketch_id = max(matches, key=lambda i: len(structures[i]))
        prefix = insts[: len(structures[sketch_id])]
        decisions = {inst: value for inst, value in record.trace.decisions.items()
                     if any(inst.same_as(x) for x in prefix)}
        latency = float(np.mean([float(x) for x in record.run_secs]))
        stored.setdefault(sketch_id, []).append((latency, state_of(Trace(prefix, decisions))))
    return stored
