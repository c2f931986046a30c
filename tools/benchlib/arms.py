"""Benchmark arms: a harl.tune strategy plus config settings, each written as a `--config` file.

An ablation arm is harl with one part switched off or replaced (MetaSchedule's task scheduler,
uniform sketches, a PPO-trained tile policy, ...); the bench tunes it beside full harl at equal
trials and paired seeds, so that each part's worth shows as a ratio against harl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harl.config_file import toml_key, toml_value
from harl.errors import HarlError

ABLATION = "ablation"
"""the name that `--arms` expands to harl and every ablation arm"""


@dataclass(frozen=True)
class Arm:
    """A named way to tune: a harl.tune strategy and config values by dotted path."""

    name: str
    """names the run folders (`<arm>-t<trials>-s<seed>`) and the rows of the results"""
    strategy: str
    """harl.tune --strategy"""
    settings: Mapping[str, str | bool | int | float] = field(default_factory=dict, hash=False)
    """config values by dotted path (`search.tile.method`), as in a --config file's tables"""
    ablation: bool = True
    """one of the arms `ablation` expands to (a harl arm that changes a default)"""


ARMS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("harl", "harl"),
    Arm("metaschedule", "metaschedule"),
    Arm("alloc-gradient", "harl", {"allocator.method": "gradient"}),
    Arm("alloc-round-robin", "harl", {"allocator.method": "round-robin"}),
    Arm("sketch-uniform", "harl", {"search.sketch.method": "uniform"}),
    Arm("tile-ppo", "harl", {"search.tile.method": "ppo"}),
    # the default spelled out, for the commands of benchmarks run when PPO was the default
    Arm("tile-prior-only", "harl", {"search.tile.method": "prior-only"}, ablation=False),
    Arm("tile-random-moves", "harl", {"search.tile.method": "random-moves"}),
    Arm("tile-evolutionary", "harl", {"search.tile.method": "evolutionary"}),
    Arm("fixed-exploration", "harl", {"search.tile.adaptive": False}),
    Arm("no-transplants", "harl", {"search.transplant_share": 0.0}),
    Arm("no-siblings", "harl", {"search.sibling_share": 0.0}),
    Arm("no-nests", "harl", {"nests.measure": False}),
    Arm("no-prior", "harl", {"cost_prior": False}),
    Arm("prepack", "harl", {"prepack_weights": True}),
    Arm("cold-timing", "harl", {"measure.flush_caches": True}),
    Arm("imported-layout", "harl", {"graph.conv_layout": "imported"}),
)}
"""every arm the bench knows, by name"""

ABLATION_ARMS: tuple[str, ...] = tuple(
    name for name, arm in ARMS.items()
    if arm.strategy == "harl" and name != "harl" and arm.ablation)
"""harl with one part changed: each is compared with full harl"""


def arm_named(name: str) -> Arm:
    """The registered arm called `name`, or a one-line HarlError listing the known ones."""
    if name not in ARMS:
        raise HarlError(f"unknown arm {name!r}; known arms: {', '.join(ARMS)} "
                        f"(or {ABLATION}: harl and every ablation arm)")
    return ARMS[name]


def parse_arms(text: str) -> list[Arm]:
    """Comma-separated arm names, `ablation` expanded, each arm once in the order first named."""
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        expanded = ["harl", *ABLATION_ARMS] if part == ABLATION else [part] if part else []
        names += [name for name in expanded if name not in names]
    if not names:
        raise HarlError("--arms names no arm")
    return [arm_named(name) for name in names]


def choose_baseline(arms: Iterable[str], requested: str | None = None) -> str:
    """The arm the others are compared with: `requested`, else metaschedule when it runs, else
    harl; a one-line HarlError when that arm is not among `arms`."""
    arms = list(arms)
    baseline = requested or ("metaschedule" if "metaschedule" in arms else "harl")
    if baseline not in arms:
        raise HarlError(f"baseline arm {baseline!r} is not among the arms run ({', '.join(arms)});"
                        " add it or choose another with --baseline")
    return baseline


# -- TOML out ---------------------------------------------------------------------------------

def arm_toml(arm: Arm) -> str:
    """The arm's settings as a harl.tune config file: top-level keys first, then one table per
    dotted prefix (`search.tile.method` goes under `[search.tile]`)."""
    tables: dict[tuple[str, ...], list[str]] = {}
    for path, value in arm.settings.items():
        *table, key = path.split(".")
        tables.setdefault(tuple(table), []).append(f"{toml_key(key)} = {toml_value(value)}")
    prefixes = {table[:i] for table in tables for i in range(1, len(table) + 1)}
    clash = prefixes & {tuple(path.split(".")) for path in arm.settings}
    if clash:
        raise HarlError(f"arm {arm.name}: {'.'.join(min(clash))} is both a value and a table")
    lines = [f"# bench arm {arm.name}: harl.tune --strategy {arm.strategy} --config this-file"]
    for table in sorted(tables):
        if table:
            lines += ["", "[" + ".".join(toml_key(part) for part in table) + "]"]
        lines += tables[table]
    return "\n".join(lines) + "\n"


def write_arm_config(arm: Arm, path: Path) -> Path | None:
    """Write the arm's config file to `path`; None (nothing written) for an arm of defaults."""
    if not arm.settings:
        return None
    path.write_text(arm_toml(arm))
    return path
