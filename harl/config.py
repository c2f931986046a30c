"""Configuration of one tuning run. Every field documents itself; the CLI help comes from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from harl.agents.task_allocator import AllocatorConfig
    from harl.graph.config import GraphConfig
    from harl.measure.build_pool import StragglerCutoff
    from harl.naive_nests import NaiveNestConfig
    from harl.search.search_config import HarlSearchConfig


def doc(text: str, **kwargs):
    """A dataclass field carrying its own help text."""
    return field(metadata={"help": text}, **kwargs)


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are built and timed."""

    build_timeout_s: float = doc("seconds one candidate may take to compile", default=60.0)
    straggler_factor: float = doc("abandon a build still running after this many times the "
                                  "median of its batch's finished builds (0: never); such "
                                  "candidates unrolled into huge, slow kernels", default=20.0)
    straggler_grace_s: float = doc("but never before this many seconds: near-best kernels "
                                   "compiled in up to 1.6 s, 19 times their task's median",
                                   default=5.0)
    run_timeout_s: float = doc("seconds one candidate may take to run", default=30.0)
    number: int = doc("runs averaged into one timing", default=3)
    repeat: int = doc("timings taken per candidate (their mean is the candidate's latency)",
                      default=1)
    min_repeat_ms: int = doc("a timing lasts at least this long (more runs for fast kernels)",
                             default=40)
    flush_caches: bool = doc("on a CPU, time each run of a candidate with its arguments after "
                             "the first (weights, residuals, output) flushed from the caches, "
                             "as a model's run finds a layer's weights (TVM's "
                             "enable_cpu_cache_flush); one run per timing", default=False)
    cold_repeats: int = doc("with flush_caches: timings per candidate, each of one cold run "
                            "(their mean is the candidate's latency)", default=8)
    reference_timing: bool = doc("time a local CPU candidate again while a reference kernel "
                                 "timed beside it says the machine runs slow "
                                 "(harl.measure.reference)", default=True)
    builder_workers: int | None = doc("parallel build processes (default: the CPU count)",
                                      default=None)
    max_failed_batches: int = doc("stop a task after this many batches in a row in which every "
                                  "candidate failed", default=3)

    def straggler_cutoff(self) -> StragglerCutoff | None:
        """When a straggling build is abandoned; None when `straggler_factor` is 0."""
        from harl.measure.build_pool import StragglerCutoff  # imports TVM: not at --help

        if self.straggler_factor <= 0:
            return None
        return StragglerCutoff(self.straggler_factor, self.straggler_grace_s)


@dataclass(frozen=True)
class RpcConfig:
    """Where candidates are timed when a TVM RPC device farm measures them."""

    tracker_host: str = doc("host of the TVM RPC tracker")
    tracker_port: int = doc("port of the TVM RPC tracker")
    key: str = doc("device key the farm's servers registered under")
    session_timeout_s: float = doc("seconds one remote measurement may take, waiting for a free "
                                   "server included; past it the candidate counts as failed",
                                   default=60.0)
    answer_timeout_s: float = doc("seconds the tracker has to answer a query", default=5.0)
    register_wait_s: float = doc("seconds to wait for a server to register under the key "
                                 "before tuning starts", default=3.0)
    lost_wait_s: float = doc("seconds the key may show no server during tuning before the run "
                             "gives up on the farm: a server re-registers after its sessions, "
                             "slowly on a loaded host", default=15.0)


@dataclass(frozen=True)
class VerifyConfig:
    """How the tuned model is checked against onnxruntime and timed."""

    rtol: float = doc("relative tolerance of the output check", default=1e-3)
    atol: float = doc("absolute tolerance of the output check", default=1e-4)
    half_tol: float = doc("floor of rtol and atol when any output is float16: its epsilon is "
                          "1e-3, and TVM and onnxruntime round sums of many products in "
                          "different orders", default=1e-2)
    latency_repeats: int = doc("latency samples per build (the median is reported)", default=20)
    timing_seconds: float = doc("about how long each build is timed: a slow one (a large model "
                                "left untuned) gets fewer samples, at least one per round",
                                default=20.0)

    def tolerances(self, dtypes) -> tuple[float, float]:
        """(rtol, atol) for a model whose outputs have these numpy dtypes (one pair for all of
        them: a model computing in float16 rounds its float32 outputs alike)."""
        if any(np.dtype(d).kind == "f" and np.dtype(d).itemsize <= 2 for d in dtypes):
            return max(self.rtol, self.half_tol), max(self.atol, self.half_tol)
        return self.rtol, self.atol


@dataclass(frozen=True)
class CostModelConfig:
    """The run's XGBoost cost model and how it is blended with the shipped prior (harl's
    strategy; MetaSchedule's baseline keeps TVM's defaults)."""

    warmup_samples: int = doc("measured candidates before the run's model scores them (before, "
                              "its scores are random)", default=8)
    equal_weight_samples: int = doc("successful measurements of a task after which the run's "
                                    "model weighs as much as the prior", default=48)
    min_task_samples: int = doc("successful measurements of a task before the run's model takes "
                                "part next to the prior", default=4)


STORE_USES = ("better", "always", "never")


@dataclass(frozen=True)
class StoreConfig:
    """The user-level store of what runs measured (harl.store): every run adds its records and
    tile policy; `use` and `tile_policy` say whether a run learns from them."""

    enabled: bool = doc("keep this run's measurements in the store and learn from earlier runs' "
                        "(off: the shipped prior only, nothing written)", default=True)
    path: Path | None = doc("the store's folder (default: $HARL_STORE, else "
                            "$XDG_CACHE_HOME/harl/store, else ~/.cache/harl/store); one subfolder "
                            "per target and TVM version", default=None)
    use: str = doc("when a cost model trained on the store ranks a run's samples: better "
                   "(where it ranked models left out of its training better than the shipped "
                   "prior), always, never (the store only keeps measurements); never by "
                   "default: trained on the records of earlier searches it ranked a new "
                   "model's fresh samples far worse than the shipped prior "
                   "(docs/benchmarks.md)", default="never")
    tile_policy: bool = doc("start the tile tuner's policy from the one the store's last run "
                            "that trained one (`search.tile.method = \"ppo\"`) left (harl's "
                            "strategy; a resumed run keeps its own); off by "
                            "default: on models it had not seen it ended 4% slower "
                            "(docs/experiments.md)", default=False)
    schedules: bool = doc("offer the best states earlier runs measured (other models' "
                          "tasks with the same loops: the same conv or matmul) among the "
                          "first candidates of this run's tasks (harl's strategy); on a "
                          "decoder after an encoder of the same width the run reached its "
                          "final without them in a third of the trials (docs/benchmarks.md)",
                          default=True)
    min_records: int = doc("measured records of tasks it would rank before a cost model is "
                           "trained on the store", default=256)
    max_records: int = doc("the newest runs' records a cost model is trained on at most",
                           default=20000)
    folds: int = doc("folds of the held-out check that decides between the store's cost model "
                     "and the shipped one", default=4)

    def __post_init__(self) -> None:
        if self.use not in STORE_USES:
            raise ValueError(f"store.use must be one of {', '.join(STORE_USES)}, got {self.use!r}")
        if self.min_records < 1 or self.max_records < 1 or self.folds < 2:
            raise ValueError("store.min_records and store.max_records must be positive and "
                            "store.folds at least 2")


def _search_config() -> HarlSearchConfig:
    from harl.search.search_config import HarlSearchConfig  # imports torch: not at --help

    return HarlSearchConfig()


def _allocator_config() -> AllocatorConfig:
    from harl.agents.task_allocator import AllocatorConfig

    return AllocatorConfig()


def _graph_config() -> GraphConfig:
    from harl.graph.config import GraphConfig

    return GraphConfig()


def _nests_config() -> NaiveNestConfig:
    from harl.naive_nests import NaiveNestConfig

    return NaiveNestConfig()


@dataclass(frozen=True)
class TuneConfig:
    """One `python -m harl.tune` run."""

    model: Path = doc("the ONNX model to tune")
    target: str | None = doc("llvm | cuda | a TVM target tag | a JSON target dict "
                             "(default: this CPU)", default=None)
    trials: int = doc("global trial budget across all tasks", default=64)
    work_dir: Path | None = doc("where logs, database and report go "
                                "(default: logs/<model name>/)", default=None)
    strategy: str = doc("search strategy: harl (the three agents) or metaschedule (TVM's "
                        "evolutionary search, the baseline)", default="harl")
    input_shapes: dict[str, tuple[int, ...]] = doc("fixed shapes for model inputs",
                                                   default_factory=dict)
    seed: int = doc("random seed for search and verification inputs", default=0)
    quiet: bool = doc("no progress output", default=False)
    evaluate: bool = doc("after tuning, compile the model, check it against onnxruntime and time "
                         "it (off: tuning only, e.g. when a benchmark times builds itself)",
                         default=True)
    trials_per_batch: int | None = doc("candidates measured per search round (default: the "
                                       "budget over two visits per task and at least three "
                                       "batches, 2 to 64)", default=None)
    fresh: bool = doc("start over: move an earlier run in the work dir aside instead of "
                      "resuming it", default=False)
    cost_prior: bool = doc("with --strategy harl on a CPU, rank each task's samples with the "
                           "cost model harl ships, trained on other workloads (harl/data/): "
                           "alone at first, then together with the run's own model",
                           default=True)
    prepack_weights: bool = doc("on a CPU, let each schedule choose how a conv's or matmul's "
                                "constant weights are laid out, the packing folded into the "
                                "weights at compile time (TVM's cpu_weight_prepack); off by "
                                "default: faster kernels alone, a slower model (docs/"
                                "experiments.md)", default=False)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    rpc: RpcConfig | None = doc("measure on this TVM RPC farm (default: in a local process)",
                                default=None)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    search: HarlSearchConfig = doc("the per-task search of harl's strategy: sketch chooser, tile "
                                   "tuner and its policy", default_factory=_search_config)
    allocator: AllocatorConfig = doc("harl's task allocator", default_factory=_allocator_config)
    nests: NaiveNestConfig = doc("when harl's strategy measures TVM's unscheduled loop nests",
                                 default_factory=_nests_config)
    cost_model: CostModelConfig = field(default_factory=CostModelConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    graph: GraphConfig = doc("the graph level: which rewrites of the imported graph are searched "
                             "before its tasks are tuned (harl.graph)",
                             default_factory=_graph_config)
    config_changed_ok: bool = doc("resume a run in the work dir even though its recorded config "
                                  "differs from this one", default=False)

    def resolved_work_dir(self) -> Path:
        """The work dir, defaulting to logs/<model stem>/."""
        return self.work_dir if self.work_dir is not None else Path("logs") / self.model.stem
