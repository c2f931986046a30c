"""Measurement throughput of a loopback TVM RPC farm: candidates timed per second, 1 vs N servers.

    python tools/rpc_throughput.py [--servers 1,2] [--candidates 16] [--rounds 3] [--size 128]

Builds a fixed set of MetaSchedule candidates of one matmul (llvm, one core: each farm server is
pinned to its own core), then for each farm size starts a farm on a free port, measures the whole
set through harl's farm runner once to warm the workers, and times `--rounds` more passes. Prints
the median throughput per farm size and the speed-up over the first size. Use an otherwise idle
machine: other work on the cores slows the servers unevenly.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harl.config import MeasureConfig, RpcConfig  # noqa: E402
from harl.farm.farm import down, free_port, up  # noqa: E402
from harl.measure.builder import PersistentBuilder  # noqa: E402
from harl.measure.rpc import FarmRunner  # noqa: E402
from harl.measure.runner import evaluator_config  # noqa: E402

KEY = "throughput"


def matmul(n: int):
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def build_candidates(n: int, count: int) -> list:
    """`count` distinct schedules of an n x n matmul from MetaSchedule's llvm design space."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from harl.target import host_target_dict, parse_target
    from harl.tvm_env import load_tensor_intrinsics

    target = parse_target(None)
    target = type(target)({**host_target_dict(), "num-cores": 1})
    load_tensor_intrinsics(target)
    mod = matmul(n)
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         search_strategy="replay-trace", task_name="matmul", rand_state=0,
                         num_threads=1)
    ctx.pre_tuning(max_trials=count, num_trials_per_iter=count,
                   design_spaces=ctx.generate_design_space())
    candidates = ctx.generate_measure_candidates()
    builder = PersistentBuilder(max_workers=2, timeout_s=120)
    try:
        built = builder.build([BuilderInput(c.sch.mod, target) for c in candidates])
    finally:
        builder.shutdown()
    args_info = ArgInfo.from_prim_func(mod["main"])
    return [RunnerInput(b.artifact_path, "cpu", args_info) for b in built if not b.error_msg]


def measure_pass(runner: FarmRunner, inputs: list) -> tuple[float, int]:
    """Seconds to time every input once, and how many failed."""
    start = time.perf_counter()
    results = [future.result() for future in runner.run(inputs)]
    return time.perf_counter() - start, sum(1 for r in results if r.error_msg)


def throughput(n_servers: int, inputs: list, rounds: int) -> tuple[float, list[float]]:
    """Median candidates per second over `rounds` timed passes on a farm of `n_servers`."""
    with tempfile.TemporaryDirectory(prefix="harl_farm_") as farm_dir:
        port = free_port()
        up(n_servers, key=KEY, port=port, directory=Path(farm_dir))
        runner = None
        try:
            rpc = RpcConfig("127.0.0.1", port, KEY)
            runner = FarmRunner(rpc, evaluator_config(MeasureConfig()), workers=n_servers)
            measure_pass(runner, inputs)  # warm-up: starts the runner's worker processes
            rates = []
            for _ in range(rounds):
                seconds, failed = measure_pass(runner, inputs)
                if failed:
                    raise RuntimeError(f"{failed} candidates failed on {n_servers} servers")
                rates.append(len(inputs) / seconds)
        finally:
            if runner is not None:
                runner.shutdown()
            down(Path(farm_dir))
    return statistics.median(rates), rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="1,2", help="farm sizes to compare (default 1,2)")
    parser.add_argument("--candidates", type=int, default=16, help="candidates per pass")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes per farm size")
    parser.add_argument("--size", type=int, default=128, help="matmul size n (n x n x n)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.servers.split(",")]

    inputs = build_candidates(args.size, args.candidates)
    print(f"{len(inputs)} built candidates of a {args.size}^3 matmul, "
          f"{args.rounds} timed passes per farm size")
    baseline = None
    for n_servers in sizes:
        rate, rates = throughput(n_servers, inputs, args.rounds)
        baseline = baseline or rate
        print(f"{n_servers} server(s): {rate:.2f} candidates/s (passes: "
              f"{', '.join(f'{r:.2f}' for r in rates)}), {rate / baseline:.2f}x "
              f"the {sizes[0]}-server farm", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
