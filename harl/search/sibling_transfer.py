"""A task's best decisions offered to the run's other tasks whose sketches have the same loops.

A model's tasks often share their main loop nest and differ only in what is fused after it: a
matmul with and without its bias or residual add, the same conv with and without the add of its
block. MetaSchedule tunes each from scratch; their best tiles, though, are close. Every task
publishes each sketch's best measured state on a board the run's tasks share, keyed by the
sketch's signature (its sites and loop extents); a task whose sketch has the same signature
measures a sibling's best once, among its first candidates (`HarlSearchConfig.sibling_share`).

The board outlives the run as JSON (`SiblingBoard.to_json`: the best state per signature its
tasks measured): a resumed run, and other models' runs through harl.store, put those states on
their own boards as offers from no task of theirs (`FOREIGN`), so the same conv or matmul tuned
in an earlier run or model is measured among a task's first candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harl.agents.tile_tuner import Site, State
from harl.search.transplant import carried_state

Signature = tuple
"""a sketch's decisions up to their values: each site's kind, levels and innermost bound, and a
tile's extent (the product of its factors)"""

FOREIGN = -1
"""the task id of offers from an earlier run or model: no task of this run has it"""


def signature_of(sites: Sequence[Site], state: State) -> Signature:
    """The signature of a sketch with `sites` whose trace drew `state`."""
    return tuple((site.kind, site.size, site.max_innermost,
                  int(np.prod(decision)) if site.kind == "tile" else None)
                 for site, decision in zip(sites, state, strict=True))


@dataclass(frozen=True)
class Offer:
    """One task's best measured state of a sketch with some signature."""

    task_id: int
    latency_s: float
    sites: tuple[Site, ...]
    state: State


class SiblingBoard:
    """The best state each task measured per sketch signature, shared by the run's tasks."""

    def __init__(self, foreign: Sequence[Offer] = ()) -> None:
        self._best: dict[Signature, dict[int, Offer]] = {}
        self.add_foreign(foreign)

    def add_foreign(self, offers: Sequence[Offer]) -> int:
        """Offers of an earlier run or model, kept as `FOREIGN`'s where they are its best for
        their signature; how many signatures gained one."""
        added = 0
        for offer in offers:
            signature = signature_of(offer.sites, offer.state)
            held = self._best.get(signature, {}).get(FOREIGN)
            if held is None or offer.latency_s < held.latency_s:
                self.publish(FOREIGN, signature, offer.sites, offer.latency_s, offer.state)
                added += held is None
        return added

    def best_offers(self, *, foreign: bool = True) -> list[Offer]:
        """The fastest offer of each signature, whichever task made it (with `foreign`, an
        earlier run or model too)."""
        best = []
        for offers in self._best.values():
            kept = [offer for task, offer in offers.items() if foreign or task != FOREIGN]
            if kept:
                best.append(min(kept, key=lambda offer: offer.latency_s))
        return best

    def to_json(self) -> list[dict]:
        """The best state of each signature this run's tasks measured, as JSON: each one's
        latency, sites and state."""
        return [{"latency_s": offer.latency_s,
                 "sites": [[site.kind, site.size, site.max_innermost] for site in offer.sites],
                 "state": [list(d) if isinstance(d, tuple) else d for d in offer.state]}
                for offer in self.best_offers(foreign=False)]

    def publish(self, task_id: int, signature: Signature, sites: Sequence[Site],
                latency_s: float, state: State) -> None:
        """A measured state of `task_id`'s sketch; kept where it is the task's best there."""
        offers = self._best.setdefault(signature, {})
        held = offers.get(task_id)
        if held is None or latency_s < held.latency_s:
            offers[task_id] = Offer(task_id, latency_s, tuple(sites), state)

    def offers(self, task_id: int, signature: Signature) -> list[Offer]:
        """Other tasks' best states of sketches with `signature`, fastest first."""
        found = self._best.get(signature, {})
        return sorted((offer for task, offer in found.items() if task != task_id),
                      key=lambda offer: offer.latency_s)


def carried_sibling_state(offer: Offer, target_sites: Sequence[Site],
                          target_options: Sequence[Sequence[int]]) -> State | None:
    """The offered state as one of the target sketch's (same signature, so the same sites),
    carried as `transplant.carried_state` carries a state between sketches, except that a
    compute location the target does not know becomes its own first known one: another
    task's loop indices need not name the same loops. None where a decision does not fit."""
    if list(offer.sites) != list(target_sites):
        return None
    state = tuple(
        options[0] if site.kind == "compute_location" and decision not in options and options
        else decision
        for site, decision, options in zip(target_sites, offer.state, target_options,
                                           strict=True))
    return carried_state(offer.sites, state, target_sites, target_options)


def offers_from_json(entries) -> list[Offer]:
    """The offers `SiblingBoard.to_json` wrote, as `FOREIGN`'s; an entry that does not read as
    one (another version's, or damaged) is left out."""
    offers = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            sites = tuple(Site(str(kind), int(size), int(innermost))
                          for kind, size, innermost in entry["sites"])
            state = tuple(tuple(int(v) for v in d) if isinstance(d, list) else int(d)
                          for d in entry["state"])
            latency = float(entry["latency_s"])
        except (KeyError, TypeError, ValueError):
            continue
        if len(state) == len(sites) and latency > 0 and all(
                isinstance(d, tuple) == (site.kind == "tile")
                for site, d in zip(sites, state, strict=True)):
            offers.append(Offer(FOREIGN, latency, sites, state))
    return offers
