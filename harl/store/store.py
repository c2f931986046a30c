"""The store's lifecycle: a run opens the folder of its target's key, asks it for a cost model
trained on what earlier runs measured, and adds its own records once it has tuned.

Layout (all of it JSON, .npz read with `allow_pickle=False`, and XGBoost's own UBJSON: nothing
that executes code on load)::

    <root>/<key digest>/key.json           what the folder's measurements depend on (harl.store.key)
    <root>/<key digest>/runs/<model>.json  one entry per model: its name, date, workloads
    <root>/<key digest>/runs/<model>.npz   ... and their features and latencies
    <root>/<key digest>/prior.ubj|.json    the cost model last trained on the entries, and how
                                           well it and the shipped prior ranked held-out models
    <root>/<key digest>/tile_policy.npz    the tile tuner's policy as the last run left it
    <root>/<key digest>/schedules/<model>.json  each sketch signature's best state in the
                                           model's run (harl.search.sibling_transfer)

A model's latest run replaces its entry. Nothing here may stop a run: an unreadable entry is
skipped with a warning, an unwritable store is reported once and the run goes on without it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from harl.agents.checkpoint import load_arrays, save_arrays, save_json, write_atomically
from harl.search.cost_prior import CostPrior, trained_model
from harl.search.sibling_transfer import Offer, SiblingBoard, offers_from_json
from harl.store import prior_training
from harl.store.key import key_digest, store_key
from harl.store.rows import MeasuredWorkload, from_arrays, read_workloads, to_arrays
from harl.tvm_adapter import xgb_predict

logger = logging.getLogger(__name__)

POLICY_FILE = "tile_policy.npz"
"""in a key's folder: the tile policy the last run left"""

SCHEDULES_DIR = "schedules"
"""in a key's folder: each model's best states per sketch signature"""

STORE_ENV = "HARL_STORE"
"""environment variable naming the store folder (before the user's cache)"""

MIN_FLOP = 1e5
"""smaller tasks are left to the run's own model when no shipped prior says otherwise"""


def default_store_path() -> Path:
    """$HARL_STORE, else $XDG_CACHE_HOME/harl/store, else ~/.cache/harl/store."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "harl" / "store"


def model_id(model: Path, input_shapes: dict | None = None) -> str:
    """16 hex digits naming a model's entry: its file's bytes and any fixed input shapes."""
    digest = hashlib.sha256()
    with open(model, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    digest.update(json.dumps({k: list(v) for k, v in sorted((input_shapes or {}).items())})
                  .encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class StorePrior:
    """What the store's trained cost model is, and whether it ranks better than the shipped one."""

    prior: CostPrior
    models: int
    """entries (models) it was trained on"""
    records: int
    held_out_rho: float | None
    """median rank correlation of its predictions on models (or, with one model, tasks) left
    out of its training, with their measured throughputs"""
    shipped_rho: float | None
    """the shipped prior's on the same workloads (None where none applies)"""

    @property
    def better(self) -> bool:
        """Whether it ranked the held-out workloads better than the shipped prior."""
        return self.held_out_rho is not None and (self.shipped_rho is None
                                                  or self.held_out_rho > self.shipped_rho)


class KnowledgeStore:
    """The folder of one target's measurements under `root` (see the module docstring).

    `min_records`: records of tasks the prior ranks (of `MIN_FLOP` or more) before a model is
    trained on them; `max_records`: the newest entries' records a model is trained on at most;
    `folds`: folds of the held-out check.
    """

    def __init__(self, root: Path, target, *, min_records: int = 256, max_records: int = 20000,
                 folds: int = 4) -> None:
        self.key = store_key(target)
        self.folder = Path(root) / key_digest(self.key)
        self.min_records, self.max_records, self.folds = min_records, max_records, folds

    @property
    def runs(self) -> Path:
        return self.folder / "runs"

    # -- reading --------------------------------------------------------------------------------

    def foreign(self) -> str | None:
        """Why the folder's entries are not this key's (its key.json differs or is unreadable);
        None when they are, or when there is no folder yet."""
        path = self.folder / "key.json"
        if not path.exists():
            return None
        try:
            written = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            return f"its key.json is unreadable ({err})"
        if written != self.key:
            return f"its key.json names another target or TVM ({json.dumps(written)[:120]})"
        return None

    def entries(self) -> list[dict]:
        """The readable entries' descriptions, newest first (unreadable ones skipped, warned)."""
        if not self.runs.is_dir():
            return []
        found = []
        for path in sorted(self.runs.glob("*.json")):
            try:
                entry = json.loads(path.read_text())
                if entry.get("key") != key_digest(self.key):
                    raise ValueError("it was written for another key")
                entry["_path"] = str(path.with_suffix(".npz"))
                found.append(entry)
            except (OSError, ValueError, AttributeError) as err:
                logger.warning(f"harl: warning: store entry {path} unreadable ({err}); skipped")
        return sorted(found, key=lambda e: str(e.get("date", "")), reverse=True)

    def workloads(self, entries: list[dict], min_flop: float) -> list[MeasuredWorkload]:
        """The entries' workloads of `min_flop` or more, newest entries first, up to
        `max_records` records; an entry that does not load is skipped with a warning."""
        chosen, records = [], 0
        for entry in entries:
            try:
                loaded = from_arrays(load_arrays(Path(entry["_path"])), entry["workloads"],
                                     source=str(entry["model_id"]))
            except Exception as err:  # noqa: BLE001  (numpy and zipfile raise many kinds)
                logger.warning(f"harl: warning: store entry {entry['_path']} unreadable "
                               f"({err}); skipped")
                continue
            loaded = [w for w in loaded if w.flop >= min_flop]
            count = sum(len(w.features) for w in loaded)
            if records and records + count > self.max_records:
                break
            chosen += loaded
            records += count
        return chosen

    def prior(self, shipped: CostPrior | None) -> StorePrior | None:
        """A cost model trained on the store's entries (retrained when they changed since the
        last one), with its held-out check; None while the store holds fewer than `min_records`
        records of tasks it would rank, or when the folder is another key's."""
        why = self.foreign()
        if why is not None:
            logger.warning(f"harl: warning: store folder {self.folder} not used: {why}")
            return None
        min_flop = shipped.min_flop if shipped is not None else MIN_FLOP
        entries = self.entries()
        digest = _entries_digest(entries, min_flop, self.max_records, shipped is not None)
        cached = self._cached_prior(digest, min_flop)
        if cached is not None:
            return cached
        workloads = self.workloads(entries, min_flop)
        records = sum(len(w.features) for w in workloads)
        if records < self.min_records:
            return None
        others = {"shipped": lambda xs: xgb_predict(shipped.xgb, xs)} \
            if shipped is not None else {}
        rhos = prior_training.held_out_rhos(workloads, folds=self.folds, others=others)
        model = prior_training.train(workloads)
        held_out = prior_training.median_or_none(rhos["trained"])
        result = StorePrior(CostPrior(model, held_out or 0.0, min_flop),
                            models=len({w.source for w in workloads}), records=records,
                            held_out_rho=held_out,
                            shipped_rho=prior_training.median_or_none(rhos.get("shipped", [])))
        self._save_prior(result, digest)
        return result

    def _cached_prior(self, digest: str, min_flop: float) -> StorePrior | None:
        manifest_path, model_path = self.folder / "prior.json", self.folder / "prior.ubj"
        if not (manifest_path.is_file() and model_path.is_file()):
            return None
        import xgboost as xgb

        try:
            manifest = json.loads(manifest_path.read_text())
            if manifest.get("digest") != digest:
                return None
            return StorePrior(CostPrior(trained_model(model_path),
                                        manifest["held_out_rho"] or 0.0, min_flop),
                              models=int(manifest["models"]), records=int(manifest["records"]),
                              held_out_rho=manifest["held_out_rho"],
                              shipped_rho=manifest["shipped_rho"])
        except (OSError, ValueError, KeyError, TypeError, xgb.core.XGBoostError) as err:
            logger.warning(f"harl: warning: store's trained cost model {model_path} unreadable "
                           f"({err}); training it again")
            return None

    def _save_prior(self, result: StorePrior, digest: str) -> None:
        try:
            raw = result.prior.xgb.booster.save_raw("ubj")
            write_atomically(self.folder / "prior.ubj", lambda file: file.write(bytes(raw)))
            save_json(self.folder / "prior.json", {
                "digest": digest, "models": result.models, "records": result.records,
                "held_out_rho": result.held_out_rho, "shipped_rho": result.shipped_rho,
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")})
        except OSError as err:
            logger.warning(f"harl: warning: store folder {self.folder} unwritable ({err}); "
                           "the trained cost model is not kept")

    def policy(self) -> dict | None:
        """The tile policy's arrays the last run left (None: none, or unreadable, warned)."""
        path = self.folder / POLICY_FILE
        if self.foreign() is not None or not path.is_file():
            return None
        try:
            return load_arrays(path)
        except Exception as err:  # noqa: BLE001  (numpy and zipfile raise many kinds)
            logger.warning(f"harl: warning: store's tile policy {path} unreadable ({err}); "
                           "the policy starts afresh")
            return None

    def schedules(self) -> list[Offer]:
        """The best states the stored models' runs measured, one per sketch signature (the
        fastest where models share one); an unreadable file is skipped, warned."""
        folder = self.folder / SCHEDULES_DIR
        if self.foreign() is not None or not folder.is_dir():
            return []
        board = SiblingBoard()
        for path in sorted(folder.glob("*.json")):
            try:
                board.add_foreign(offers_from_json(json.loads(path.read_text())))
            except (OSError, ValueError) as err:
                logger.warning(f"harl: warning: stored schedules {path} unreadable ({err}); "
                               "skipped")
        return board.best_offers()

    # -- writing --------------------------------------------------------------------------------

    def add_schedules(self, offers_json: list[dict], *, model_id: str) -> bool:
        """Keep a run's sibling board (`SiblingBoard.to_json`) as model `model_id`'s best
        states, replacing its earlier ones; False when the store could not be written."""
        if self.foreign() is not None:
            return False
        try:
            self._claim()
            (self.folder / SCHEDULES_DIR).mkdir(exist_ok=True)
            save_json(self.folder / SCHEDULES_DIR / f"{model_id}.json", offers_json)
        except OSError as err:
            logger.warning(f"harl: warning: store {self.folder} unwritable ({err}); the run's "
                           "schedules are not kept")
            return False
        return True

    def add_policy(self, arrays: dict) -> bool:
        """Keep a run's tile policy as the one the next run starts from; False when the store
        could not be written (warned)."""
        if self.foreign() is not None:
            return False
        try:
            self._claim()
            save_arrays(self.folder / POLICY_FILE, arrays)
        except OSError as err:
            logger.warning(f"harl: warning: store {self.folder} unwritable ({err}); the tile "
                           "policy is not kept")
            return False
        return True

    def add_run(self, work_dir: Path, *, model_id: str, model_name: str) -> int | None:
        """Keep the searched records of the run in `work_dir` as the entry of model `model_id`
        (replacing its earlier one); how many records, or None when the store could not be
        written (warned: the run goes on)."""
        return self.add_workloads(read_workloads(work_dir), model_id=model_id,
                                  model_name=model_name)

    def add_workloads(self, workloads: list[MeasuredWorkload], *, model_id: str,
                      model_name: str) -> int | None:
        """Keep `workloads` as the entry of model `model_id` (see `add_run`)."""
        why = self.foreign()
        if why is not None:
            logger.warning(f"harl: warning: store folder {self.folder} not written: {why}")
            return None
        arrays, described = to_arrays(workloads)
        entry = {"key": key_digest(self.key), "model_id": model_id, "model": model_name,
                 "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                 "records": int(len(arrays["stores"])), "workloads": described}
        try:
            self._claim()
            save_arrays(self.runs / f"{model_id}.npz", arrays)
            save_json(self.runs / f"{model_id}.json", entry)
        except OSError as err:
            logger.warning(f"harl: warning: store {self.folder} unwritable ({err}); this run's "
                           "measurements are not kept for later runs")
            return None
        return entry["records"]

    def _claim(self) -> None:
        """Make the folder and its runs/ (OSError where it cannot), and its key.json."""
        self.runs.mkdir(parents=True, exist_ok=True)
        if not (self.folder / "key.json").exists():
            save_json(self.folder / "key.json", self.key)


def _entries_digest(entries: list[dict], *settings) -> str:
    """What a trained model and its check depend on: each entry's model, date and records, and
    `settings` (the FLOP floor, the record cap, whether a shipped prior was compared)."""
    described = [(e.get("model_id"), e.get("date"), e.get("records")) for e in entries]
    return hashlib.sha256(json.dumps([described, *settings]).encode()).hexdigest()[:16]


__all__ = ["KnowledgeStore", "StorePrior", "default_store_path", "model_id"]
