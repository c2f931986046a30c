"""`python -m harl.tune MODEL.onnx`: import, tune, compile, verify, report.

This is the one outer loop; every step lives in its own module.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from pathlib import Path

from harl.cli import build_parser, config_from_args, resume_command, write_failure
from harl.config import TuneConfig
from harl.config_file import recorded, to_toml
from harl.config_resume import refuse_changed_config
from harl.database.repair import load_database
from harl.errors import HarlError, VerificationError
from harl.evaluate import evaluate_into
from harl.frontend.graph_writer import set_input_shapes
from harl.frontend.large_models import save_beside_weights, serialised
from harl.frontend.lowering import describe_lowered
from harl.frontend.onnx_model import (
    IMPORTED_MODEL_FILE,
    OnnxModel,
    import_model,
    load_onnx,
)
from harl.frontend.tasks import extract_tasks
from harl.graph.pipeline import GraphStage, first_budget, laid_out, summary_line, trials_in
from harl.loop import LoopResume, LoopSettings, default_batch_size, tune_tasks
from harl.measure.clock import StageClock
from harl.measure.threads import use_physical_cores
from harl.midway import Midway
from harl.report.history import TaskStats, last_history_time_s
from harl.report.messages import messages_to
from harl.report.phases import PhaseClock
from harl.report.progress import Progress
from harl.report.summary import RunReport, format_summary, task_summaries
from harl.resume import PriorRun, RunManifest, claim_work_dir
from harl.search import make_plan
from harl.store.in_run import StartingKnowledge, keep_run, open_store, starting_knowledge
from harl.target import gpu_visible, is_gpu, local_cpu_count, parse_target
from harl.tvm_env import (
    load_tensor_intrinsics,
    native_logs_into,
    quiet_tvm_loggers,
    serve_unknown_schedule_rules,
)
from harl.untuned import schedule_untuned
from harl.workdir_lock import work_dir_lock

logger = logging.getLogger("harl.tune")  # not __name__: `python -m harl.tune` runs as __main__


def prepare_work_dir(path: Path) -> Path:
    """Create the work dir and make sure it is writable before any tuning starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".harl_write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise HarlError(f"cannot write to work dir {path}: {err.strerror or err}") from None
    return path


def resume_state(work_dir: Path, tasks) -> LoopResume:
    """The work dir's database (repaired where damaged, with a warning) and what it already
    holds for each task."""
    database = load_database(work_dir)
    prior = PriorRun.read(database, [task.mod for task in tasks])
    stats = [TaskStats(task.name, task.weight, task.flop) for task in tasks]
    prior.seed_stats(stats)
    return LoopResume(database, stats, prior, last_history_time_s(work_dir / "history.csv"))


def save_imported(model: OnnxModel, path: Path) -> str:
    """Save the graph harl imported (folded, rewritten, its input shapes fixed) for plain TVM
    builds; says where, or why it could not."""
    import onnx
    from google.protobuf.message import EncodeError

    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    set_input_shapes(proto, {spec.name: spec.shape for spec in model.inputs})
    try:  # past 2 GB a protobuf cannot hold the weights: they go to a file beside it
        data = serialised(proto)
        if data is not None:
            path.write_bytes(data)
        else:
            save_beside_weights(proto, path)
    except (OSError, ValueError, EncodeError) as err:
        return f"not saved: {err}"
    return f"saved as {path}: the graph to import for plain TVM builds with this log"


def run(config: TuneConfig, out=None) -> RunReport:
    """Tune one model end to end and return its report (also written to the work dir); harl's
    messages go to `out` (stdout), none with `config.quiet`."""
    with (messages_to(out if out is not None else sys.stdout, quiet=config.quiet),
          contextlib.ExitStack() as held):  # the work dir's lock, once the work dir is made
        return _run(config, held)


def _run(config: TuneConfig, held: contextlib.ExitStack) -> RunReport:
    if config.trials <= 0:
        raise HarlError(f"--trials must be a positive number, got {config.trials}")
    clock = PhaseClock()

    # 1. Model, target, and the work dir's earlier run if any
    runtime_threads, threads_set = use_physical_cores()  # before any kernel runs here
    model = load_onnx(config.model, config.input_shapes)
    if model.assumed_dims:
        first = next(spec for spec in model.inputs if spec.name == model.assumed_dims[0][0])
        dims = ", ".join(f"{name}[0]" + (f" {dim!r}" if dim else "")
                         for name, dim in model.assumed_dims)
        logger.info(f"harl: {model.name}: batch dim {dims} is symbolic: tuned for 1 "
                    f"(--input-shape {first.name}:{','.join(map(str, first.shape))} with "
                    "another size to choose)")
    target = parse_target(config.target)
    if is_gpu(target) and config.rpc is not None:
        logger.info(f"harl: kernels are built for {target.attrs.get('arch', '?')}"
                    + ("" if gpu_visible() else " (no GPU here)") + "; a target tag such as "
                    "nvidia/nvidia-h100 matches other GPU servers")
    elif is_gpu(target) and not gpu_visible():
        raise HarlError(f"--target {config.target} measures on a GPU and none is visible here: "
                        "pass --rpc-tracker HOST:PORT --rpc-key KEY to measure on a GPU server")
    if config.rpc is not None:  # fail in seconds, before import and extraction, if nobody serves
        from harl.measure.rpc import preflight

        preflight(config.rpc)
    work_dir = prepare_work_dir(config.resolved_work_dir())
    held.enter_context(work_dir_lock(work_dir))  # before --fresh moves anything
    asked_prior = config.strategy == "harl" and config.cost_prior
    manifest = RunManifest.of(config.model, target, config.strategy, asked_prior,
                              recorded(config))
    refuse_changed_config(work_dir, manifest, config)
    claim_work_dir(work_dir, manifest, fresh=config.fresh)
    (work_dir / "logs").mkdir(exist_ok=True)
    tvm_log = work_dir / "logs" / "tvm.log"
    quiet_tvm_loggers(tvm_log)
    load_tensor_intrinsics(target)
    with native_logs_into(tvm_log):
        imported, original = import_model(model, fast_math=not is_gpu(target))
    graph, relax_mod = None, original
    if config.graph.method != "off":  # rewrite the graph before its tasks are cut out
        graph = GraphStage(config.graph, work_dir=work_dir, target=target, model=model,
                           verify=config.verify, seed=config.seed,
                           prepack_weights=config.prepack_weights)
        with native_logs_into(tvm_log):
            relax_mod = graph.first(original)
    with native_logs_into(tvm_log):
        relax_mod = laid_out(relax_mod, target, config.graph, work_dir)
    tasks = _tasks_of(relax_mod, target, tvm_log, prepack_weights=config.prepack_weights)
    rewrites = []
    if imported.shapes_folded:
        rewrites.append("it computes some tensor shapes in its graph: they are folded by "
                        "onnxruntime")
    if imported.ops_lowered:
        rewrites.append(describe_lowered(imported.ops_lowered))
    if config.input_shapes or model.assumed_dims:  # plain TVM imports static shapes only
        rewrites.append("its input shapes are fixed")
    if rewrites:
        saved = save_imported(imported, work_dir / IMPORTED_MODEL_FILE)
        logger.info(f"harl: {model.name}: {'; '.join(rewrites)} ({saved})")
    # Builds, the search's threads and the cost model run here, whatever cores the target has
    # (its num-cores shapes the kernels: a farm's target may have 64 cores or one).
    num_cores = local_cpu_count()
    batch = config.trials_per_batch or default_batch_size(config.trials, len(tasks))
    logger.info(f"harl: {model.name}: {len(tasks)} tasks, target {target.kind.name}, "
                f"strategy {config.strategy}, {config.trials} trials ({batch} per batch) -> "
                f"{work_dir}")
    if threads_set and not is_gpu(target):  # a GPU's kernels do not use the thread pool
        plural = "s" if runtime_threads != 1 else ""
        logger.info(f"harl: TVM's runtime runs kernels here on {runtime_threads} "
                    f"thread{plural}, one per core (set TVM_NUM_THREADS to choose; plain TVM "
                    "builds need it too)")
    if config.rpc is not None:
        logger.info(f"harl: measuring on RPC key {config.rpc.key!r} at "
                    f"{config.rpc.tracker_host}:{config.rpc.tracker_port}")
    store = open_store(config.store, target)
    knowledge = starting_knowledge(store, target, tasks, strategy=config.strategy,
                                   cost_prior=asked_prior, config=config.store)
    resume = resume_state(work_dir, tasks)
    # With --graph, the trials of every graph tuned count (--trials caps them all).
    resumed = trials_in(resume.database) if graph else resume.prior.trials
    remaining = config.trials - resumed
    if resumed:
        logger.info(f"harl: resuming: {resumed} trials already in the database, "
                    + (f"{remaining} to go" if remaining > 0 else f"the budget of "
                       f"{config.trials} is spent; going straight to compile and verify"))

    # 2. Tune (with --graph: most of the trials, a second graph search, the rest)
    clock.lap("setup")
    stage_clock = StageClock()
    step = functools.partial(_tune_step, target=target, work_dir=work_dir, config=config,
                             batch=batch, num_cores=num_cores, knowledge=knowledge,
                             clock=stage_clock)
    second: list = []  # the graph the second search chose, once it ran

    def second_search() -> bool:
        with native_logs_into(tvm_log):
            second.append(graph.second(original, relax_mod))
        return second[0] is not relax_mod

    def switch_graph():
        """The second search's graph and its tasks, for the rest of the trials."""
        with native_logs_into(tvm_log):
            chosen = laid_out(second[0], target, config.graph, work_dir)
        new_tasks = _tasks_of(chosen, target, tvm_log, prepack_weights=config.prepack_weights)
        new_resume = resume_state(work_dir, new_tasks)
        return chosen, new_tasks, new_resume, trials_in(new_resume.database)

    first = first_budget(config.trials, config.graph) if graph else config.trials
    midway = None
    if graph is not None and resumed >= first:  # the first share was tuned before a stop
        if second_search():
            relax_mod, tasks, resume, resumed = switch_graph()
    elif graph is not None:  # the second search inside the loop: no new loop if nothing changes
        midway = Midway(after=first - resumed, decide=second_search)
    plans = [step(tasks, resume, trials=config.trials - resumed, done=resumed, midway=midway)]
    if midway is not None:
        if not midway.decided:  # the loop ended before its mark: the search runs now
            second_search()
        if second[0] is not relax_mod:
            relax_mod, tasks, resume, done = switch_graph()
            plans.append(step(tasks, resume, trials=config.trials - done, done=done))
    plans = [plan for plan in plans if plan is not None]
    plan = plans[-1] if plans else None
    database, stats = resume.database, resume.stats
    tune_seconds = clock.lap("tuning")
    if store is not None:
        keep_run(store, work_dir, model=config.model, input_shapes=config.input_shapes,
                 model_name=model.name, policy_trained=config.strategy == "harl"
                 and config.search.tile.method == "ppo")
        clock.lap("store")

    # 3. Compile, verify, time
    report = RunReport(
        model=str(config.model), target=str(target), gpu_target=is_gpu(target),
        strategy=config.strategy,
        trials=config.trials,
        trials_done=trials_in(database) if graph else sum(s.trials for s in stats),
        trials_resumed=resumed, seed=config.seed,
        tune_seconds=round(tune_seconds, 2), tasks=task_summaries(stats),
        work_dir=str(work_dir),
        agent_seconds=_metric_sums(plans, "totals"),
        agent_stage_seconds=_metric_sums(plans, "stages"),
        cost_prior=knowledge.cost_prior is not None, cost_prior_source=knowledge.prior_source,
        runtime_threads=runtime_threads,
        measure_other_cores=_rounded(stage_clock.others_while_measuring()),
        config=recorded(config), graph=graph.entry if graph else None,
    )
    if config.evaluate:
        compile_database = database
        if not is_gpu(target):  # on GPUs TVM's DLight rules schedule what was not tuned
            with native_logs_into(tvm_log):
                compile_database = schedule_untuned(report, tasks, target, database, plan=plan,
                                                    prior=resume.prior,
                                                    cost_prior=knowledge.cost_prior,
                                                    config=config, clock=clock)
        logger.info("harl: compiling and verifying against onnxruntime ...")
        evaluate_into(report, model, relax_mod, target, compile_database, config=config,
                      clock=clock, tvm_log=tvm_log)

    # 4. Report
    report.phase_seconds = {phase: round(value, 2) for phase, value in clock.seconds.items()}
    report.write(work_dir / "report.json")
    logger.info(format_summary(report))
    if graph is not None:
        logger.info(summary_line(graph.entry))
    logger.info(f"harl: database, history.csv and report.json in {work_dir}")
    if report.verified is False:
        raise VerificationError(
            f"tuned model output {report.worst_output!r} differs from "
            f"{report.verified_against or 'onnxruntime'} by "
            f"{report.max_abs_err:.3g} (rtol {report.rtol:g}, atol {report.atol:g}); "
            f"database kept in {work_dir}")
    return report


def _tasks_of(relax_mod, target, tvm_log: Path, *, prepack_weights: bool):
    """The graph's tuning tasks, with schedule rules served for the ops TVM has none for."""
    with native_logs_into(tvm_log):
        tasks = extract_tasks(relax_mod, target, prepack_weights=prepack_weights)
    serve_unknown_schedule_rules([task.mod for task in tasks], target)
    return tasks


def step_seed(seed: int, done: int) -> int:
    """The search seed of a tuning step that starts with `done` trials measured: the run's seed
    for the first step, another for a later one (the graph level's second step, a resume), so
    that its searches do not draw again the samples the first one drew."""
    return seed if done == 0 else (seed * 1_000_003 + done) % (2**31 - 1)


def _tune_step(tasks, resume: LoopResume, *, trials: int, done: int, target, work_dir: Path,
               config: TuneConfig, batch: int, num_cores: int, knowledge: StartingKnowledge,
               clock: StageClock, midway: Midway | None = None):
    """Tune `tasks` for `trials` more trials (`done` already measured), starting from
    `knowledge` (`midway`: a decision inside the loop, harl.midway); returns the search plan,
    or None where no trial is left."""
    if trials <= 0:
        return None
    seed = step_seed(config.seed, done)
    plan = make_plan(config.strategy, seed=seed, num_cores=num_cores, tasks=tasks,
                     overlap=config.rpc is not None,  # the farm's futures are pending
                     cost_prior=knowledge.cost_prior, search=config.search,
                     allocator=config.allocator, nests=config.nests, cost_model=config.cost_model,
                     initial_policy=knowledge.tile_policy, stored_offers=knowledge.offers)
    settings = LoopSettings(trials=trials, trials_per_batch=batch, seed=seed,
                            num_cores=num_cores)
    progress = Progress(config.trials, enabled=False if config.quiet else None, done_before=done)
    tune_tasks(tasks, target, plan, work_dir, settings=settings, measure=config.measure,
               progress=progress, resume=resume, rpc=config.rpc, clock=clock, midway=midway)
    return plan


def _metric_sums(plans, part: str) -> dict[str, float]:
    """The search plans' agent seconds (`part`: "totals" or "stages"), summed."""
    sums: dict[str, float] = {}
    for plan in plans:
        for key, value in (getattr(plan.metrics, part) if plan.metrics else {}).items():
            sums[key] = sums.get(key, 0.0) + value
    return {key: round(value, 3) for key, value in sums.items()}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _message_work_dir(config: TuneConfig | None, args) -> Path:
    """The run's work dir for a closing message, also when the config could not be made."""
    return (config or TuneConfig(model=args.model, work_dir=args.work_dir)).resolved_work_dir()


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run, and turn known failures into one line on stderr."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model is None and not args.print_config:
        parser.error("the following arguments are required: model")
    config = None
    try:
        config = config_from_args(args)
        if args.print_config:
            print(to_toml(config), end="")
            return 0
        run(config)
    except HarlError as err:
        if args.debug:
            raise
        print(f"harl: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        work_dir = _message_work_dir(config, args)
        print(f"\nharl: interrupted; every trial measured so far is kept in {work_dir}; "
              f"resume with: {resume_command(argv)}", file=sys.stderr)
        return 130
    except OSError as err:  # a write that failed: a full disk, a quota, a read-only mount
        if args.debug:
            raise
        work_dir = _message_work_dir(config, args)
        print(f"harl: error: {write_failure(err)}; the trials measured before it are kept in "
              f"{work_dir}; resume with: {resume_command(argv)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
