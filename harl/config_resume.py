"""A resumed run's config against the one its work dir was tuned with: which settings shape the
search, which may change between the commands of one run, and the one-line refusal otherwise."""

from __future__ import annotations

import json
from pathlib import Path

from harl.config import TuneConfig
from harl.config_file import recorded
from harl.database import RECORD_FILE
from harl.errors import HarlError
from harl.resume import RunManifest

RESUME_NEUTRAL = ("model", "work_dir", "fresh", "config_changed_ok", "quiet", "trials",
                  "evaluate", "verify", "rpc", "store")
"""TuneConfig fields a resumed run may change: where the run lives and is shown, how far it
goes, what is done after tuning, which farm measures, and the store of earlier runs (which
other runs change anyway); the rest shapes the search"""


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


BEFORE_ADDED = {"prepack_weights": False, "graph.conv_layout": "imported"}
"""fields added after configs were first recorded that change the tasks' workloads, with the
value a run recorded without them had"""


def config_changes(earlier: dict, now: dict) -> list[str]:
    """The search-shaping settings (not RESUME_NEUTRAL ones) that differ, as "key a -> b".
    Other keys only one side has (a field added or removed by another version of harl) are
    not compared; BEFORE_ADDED's are."""
    def shaping(data):
        return _flat({k: v for k, v in data.items() if k not in RESUME_NEUTRAL})

    before, after = {**BEFORE_ADDED, **shaping(earlier)}, shaping(now)
    return [f"{key} {json.dumps(before[key])} -> {json.dumps(after[key])}"
            for key in sorted(set(before) & set(after)) if before[key] != after[key]]


def refuse_changed_config(work_dir: Path, manifest, config: TuneConfig) -> None:
    """A one-line HarlError when the run in `work_dir` (one with trials, of the same model,
    target and strategy as `manifest`, a harl.resume.RunManifest) was tuned with other search
    settings than `config`'s, unless `config` says to start over or that this is fine."""
    if config.fresh or config.config_changed_ok:
        return
    records = work_dir / RECORD_FILE
    if not records.exists() or not records.stat().st_size:
        return
    earlier = RunManifest.read(work_dir)
    if earlier is None or earlier.config is None or manifest.mismatch(earlier) is not None:
        return  # nothing to compare, or another run: harl.resume.claim_work_dir says so
    changes = config_changes(earlier.config, recorded(config))
    if changes:
        more = f" and {len(changes) - 2} more" if len(changes) > 2 else ""
        raise HarlError(f"work dir {work_dir} holds a run tuned with another config "
                        f"({'; '.join(changes[:2])}{more}); pass --config-changed-ok to resume it "
                        "with this one, --fresh to start over there, or another --work-dir")
