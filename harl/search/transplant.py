"""A task's best decisions carried into its sibling sketches, to compare sketches on equal tiles.

Sketches of one task often draw the same decisions: TVM's multi-level tiling with its cache write at
different loops, and harl's serial variants of each. Judged by its first random samples, a sketch's
structure is confounded with the luck of its tiles. A transplant measures the task's best state in a
sibling once: a paired comparison of the two structures, and a good start for the sibling's own
refinements if it wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from harl.agents.tile_tuner import Site, State, is_legal


def carried_state(source_sites: Sequence[Site], state: State, target_sites: Sequence[Site],
                  target_options: Sequence[Sequence[int]]) -> State | None:
    """`state` of a sketch with `source_sites` as a state of a sketch with `target_sites`, or
    None where their decisions differ.

    Sites other than the parallel extent must agree in order, kind and bounds (so a tile or a
    category fits), and a choice must be one of the target's known options. A parallel extent
    is carried where both have one and the target allows it; otherwise the target's own (its
    last option), and one the target lacks is dropped: a serial variant is its sketch without
    the annotation.
    """
    source = [(site, decision) for site, decision in zip(source_sites, state, strict=True)
              if site.kind != "parallel"]
    if [site for site, _ in source] != [site for site in target_sites
                                        if site.kind != "parallel"]:
        return None
    decisions = iter(decision for _, decision in source)
    extents = iter(decision for site, decision in zip(source_sites, state, strict=True)
                   if site.kind == "parallel")
    carried = []
    for site, options in zip(target_sites, target_options, strict=True):
        if site.kind == "parallel":
            extent = next(extents, None)
            if extent not in options:
                if not options:
                    return None
                extent = options[-1]
            carried.append(extent)
            continue
        decision = next(decisions)
        if not is_legal(site, decision, options=options):
            return None
        carried.append(decision)
    return tuple(carried)
