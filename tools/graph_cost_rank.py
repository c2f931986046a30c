"""How well harl's graph cost (harl.graph.cost) ranks variants of a model's graph.

Makes variants of an ONNX model's Relax graph with TVM's own passes and knobs (parallel matmuls
merged with the weights lifted to parameters, NHWC conv layouts, transposes folded into
matmuls, single operators kept out of fusion by marking their PrimFunc opaque), estimates each
with the graph cost model, compiles each (with a harl work dir's database where given:
harl's compile_model applies it; tasks it lacks keep TVM's default schedules, or get the cost
model's pick with --picks, as harl's own builds give them), times them in interleaved rounds
on the relax VM, and prints Spearman's rank correlation of estimated against measured latency.

    python tools/graph_cost_rank.py tasks/examples/cnn.onnx --work-dir logs/cost_cnn --picks

On 2026-11-27 (2-core AMD EPYC, databases from 32-trial runs, --picks, 15 variants per model)
rho was 0.57-0.59 on the example transformer block and -0.09 to 0.09 on the example CNN; over the
fusion variants alone 0.62-0.65 and 0.79-0.82. The CNN's NHWC variants and the transformer's merged
Q/K/V matmul were estimated cheaper and measured slower.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

OPAQUE = 8  # TVM's OpPatternKind kOpaque: FuseOps leaves the function alone


def lifted_and_combined(model):
    """The graph imported with its weights as parameters, parallel matmuls that share an input
    merged (CombineParallelMatmul fires on parameters only), the weights bound again."""
    from tvm import relax
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.onnx import from_onnx

    from harl.frontend.onnx_model import for_inference

    mod = from_onnx(model.proto, shape_dict={s.name: list(s.shape) for s in model.inputs},
                    dtype_dict={s.name: s.dtype for s in model.inputs},
                    keep_params_in_input=True)
    mod, params = detach_params(mod)
    mod = relax.transform.CombineParallelMatmul()(mod)
    weights = mod["main"].params[len(mod["main"].params) - len(params["main"]):]
    mod = relax.transform.BindParams("main", dict(zip(weights, params["main"], strict=True)))(mod)
    return for_inference(mod)


def legalised(mod, target):
    """`mod` with its operators lowered to annotated PrimFuncs (what FuseOps groups)."""
    import tvm
    from tvm import relax

    with target:
        return tvm.transform.Sequential([*relax.pipeline.library_dispatch_passes(target),
                                         relax.transform.LegalizeOps(),
                                         relax.transform.AnnotateTIROpPattern()])(mod)


def with_opaque(mod, names: set[str]):
    """`mod` (legalised) with the PrimFuncs named in `names` kept out of fusion."""
    mod = mod.clone()
    for gv in list(mod.get_global_vars()):
        if gv.name_hint in names:
            mod[gv] = mod[gv].with_attr("op_pattern", OPAQUE)
    return mod


def fusable_prim_funcs(mod) -> list[str]:
    """Names of `mod`'s PrimFuncs that FuseOps may fuse (not opaque), sorted."""
    import tvm

    return sorted(gv.name_hint for gv, func in mod.functions.items()
                  if isinstance(func, tvm.tirx.PrimFunc)
                  and int(func.attrs.get("op_pattern", OPAQUE)) < OPAQUE)


def variants(model, base, target, max_opaque: int) -> list[tuple[str, object]]:
    """(name, Relax module) per variant of the graph; graphs cut into the same tasks as an
    earlier variant are left out."""
    from tvm import relax
    from tvm.s_tir.meta_schedule.utils import shash2hex

    from harl.frontend.tasks import extract_tasks

    made = [("imported", base)]
    made.append(("fuse-transpose-matmul", relax.transform.FuseTransposeMatmul()(base)))
    try:
        combined = lifted_and_combined(model)
        made.append(("combine-parallel-matmul", combined))
        made.append(("combine+fuse-transpose", relax.transform.FuseTransposeMatmul()(combined)))
    except Exception as err:  # noqa: BLE001  (a variant the passes cannot make is left out)
        print(f"  combine-parallel-matmul: not made ({type(err).__name__}: {err})")
    for kernel in ("OIHW", "OHWI", "HWIO"):
        made.append((f"nhwc-{kernel}", relax.transform.ConvertLayout(
            {"relax.nn.conv2d": ["NHWC", kernel]})(base)))
    lowered = legalised(base, target)
    names = fusable_prim_funcs(lowered)
    for name in names[:max_opaque]:
        made.append((f"opaque:{name}", with_opaque(lowered, {name})))
    made.append(("opaque:all", with_opaque(lowered, set(names))))
    kept, seen = [], set()
    for name, mod in made:
        try:
            key = tuple(sorted((shash2hex(t.mod), t.weight)
                               for t in extract_tasks(mod, target)))
        except Exception as err:  # noqa: BLE001
            print(f"  {name}: left out ({type(err).__name__}: {err})")
            continue
        if key not in seen:
            seen.add(key)
            kept.append((name, mod))
    return kept


def with_picks(database, mod, target, scorer, prepack_weights: bool):
    """`database` joined with the cost model's picks for `mod`'s tasks it lacks."""
    from harl.frontend.tasks import extract_tasks
    from harl.untuned import with_predicted

    tasks = extract_tasks(mod, target, prepack_weights=prepack_weights)
    wanted = [i for i, task in enumerate(tasks) if not database.has_workload(task.mod)]
    return with_predicted(database, tasks, wanted, target, scorer)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="a harl work dir: its database is measured from and compiled with")
    parser.add_argument("--picks", action="store_true",
                        help="compile tasks the database lacks with the cost model's picks")
    parser.add_argument("--no-scorer", action="store_true",
                        help="estimate from roofline times alone (the cost model left out)")
    parser.add_argument("--max-opaque", type=int, default=12,
                        help="variants with one operator kept out of fusion, at most")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--repeats", type=int, default=10, help="timings per variant per round")
    args = parser.parse_args(argv)

    import scipy.stats
    from tvm.s_tir import meta_schedule as ms

    from harl.evaluate import CompiledModel, compile_model
    from harl.frontend.onnx_model import import_model, load_onnx
    from harl.graph.cost import GraphCostModel
    from harl.target import parse_target
    from harl.tvm_env import load_tensor_intrinsics

    target = parse_target(None)
    load_tensor_intrinsics(target)  # before anything imports TVM's whole set (a minute or more)
    model, base = import_model(load_onnx(args.model))
    started = time.perf_counter()
    if args.work_dir is not None:
        estimator = GraphCostModel.from_work_dir(args.work_dir, target)
        database = estimator_database(args.work_dir)
    else:
        estimator, database = GraphCostModel(target), ms.database.MemoryDatabase()
    if args.no_scorer:
        estimator.samples = 0
    print(f"estimator ready in {time.perf_counter() - started:.1f} s: "
          f"{len(estimator.measured)} measured workloads, {estimator.calibration}")
    made = variants(model, base, target, args.max_opaque)
    print(f"{len(made)} distinct variants")
    estimates = []
    for name, mod in made:
        started = time.perf_counter()
        cost = estimator.estimate(mod)
        estimates.append(cost.total_ms)
        print(f"  {name:<40} est {cost.total_ms:8.4f} ms  {len(cost.tasks):2d} tasks, "
              f"{sum(t.source == 'measured' for t in cost.tasks):2d} measured  "
              f"({time.perf_counter() - started:.2f} s)")
    rng = np.random.default_rng(0)
    inputs = {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in model.inputs}
    compiled = []
    for _, mod in made:
        db = (with_picks(database, mod, target, estimator.scorer, estimator.prepack_weights)
              if args.picks else database)
        compiled.append(CompiledModel(compile_model(mod, target, db,
                                                    prepack_weights=estimator.prepack_weights),
                                      target, [s.name for s in model.inputs]))
    timings = np.zeros((args.rounds, len(made)))
    for r in range(args.rounds):
        for i in rng.permutation(len(made)):
            timings[r, i] = compiled[i].median_latency_ms(inputs, args.repeats)
    measured = np.median(timings, axis=0)
    print(f"{'variant':<42} {'estimated':>10} {'measured':>10}")
    for (name, _), est, real in zip(made, estimates, measured, strict=True):
        print(f"{name:<42} {est:10.4f} {real:10.4f}")
    names = [name for name, _ in made]
    fusion = [i for i, name in enumerate(names)
              if name == "imported" or name.startswith("opaque:")]
    for label, chosen in (("all", range(len(made))), ("fusion only", fusion)):
        chosen = list(chosen)
        if len(chosen) >= 3:
            rho = scipy.stats.spearmanr([estimates[i] for i in chosen], measured[chosen])
            print(f"Spearman rho, {label} ({len(chosen)} variants): {rho.statistic:.3f} "
                  f"(p = {rho.pvalue:.3g})")
    return 0


def estimator_database(work_dir: Path):
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(
        path_workload=str(work_dir / "database_workload.json"),
        path_tuning_record=str(work_dir / "database_tuning_record.json"), allow_missing=False)


if __name__ == "__main__":
    raise SystemExit(main())
