"""Time one model compiled with each of several work dirs' databases, interleaved.

    python tools/compare_work_dirs.py MODEL.onnx WORK_DIR [WORK_DIR ...] [--rounds 10]
        [--processes 3] [--with-picks] [--no-openvino]

Latencies measured in separate runs drift with machine load; here every build (plus untuned TVM,
onnxruntime and, when installed, OpenVINO's CPU runtime in fp32) is timed round-robin, in each
of a few fresh processes as `tools/bench.py` times them (benchlib.timing), and medians over
processes and ratios are printed. With --with-picks each work dir is also built the way
`python -m harl.tune` compiles it: the tasks without a measured record get the pick of a cost
model trained on the dir's records (harl/untuned.py). A work dir whose run rewrote the graph
(`--graph`) is built from its `model_rewritten.json`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchlib.openvino_runner import INSTALL_HINT, openvino_wanted
from benchlib.timing import TimingSettings, time_in_processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("work_dirs", type=Path, nargs="+")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes that each compile and time every build")
    parser.add_argument("--with-picks", action="store_true",
                        help="also build each dir with the cost model's picks for its untuned "
                             "tasks")
    parser.add_argument("--no-openvino", action="store_true",
                        help="do not time OpenVINO's CPU runtime (fp32, TVM's thread count); by "
                             f"default it is timed when installed ({INSTALL_HINT})")
    args = parser.parse_args()
    settings = TimingSettings(rounds=args.rounds, processes=args.processes,
                              openvino=openvino_wanted(not args.no_openvino))
    timings = time_in_processes(args.model, [str(d) for d in args.work_dirs], None, settings,
                                with_picks=args.with_picks)
    failed = {key for t in timings for key, (verified, _) in t.checks.items() if not verified}
    if failed:
        sys.exit("outputs disagree with onnxruntime (or with untuned TVM where TVM itself "
                 f"does): {', '.join(sorted(failed))}")
    # every process's builds, in timing order (OpenVINO's only where its outputs matched)
    keys = list(dict.fromkeys(key for t in timings for key in t.latency_ms))
    if str(args.work_dirs[0]) not in keys:
        sys.exit(f"{args.work_dirs[0]} holds no tuning records")
    medians = {key: statistics.median(t.latency_ms[key] for t in timings if key in t.latency_ms)
               for key in keys}
    baseline = medians[str(args.work_dirs[0])]
    print(f"{'build':<48} {'median ms':>10} {'vs first work dir':>18}  per process (ms)")
    for key in keys:
        per_process = ", ".join(f"{t.latency_ms[key]:.4g}" for t in timings
                                if key in t.latency_ms)
        print(f"{key:<48} {medians[key]:>10.4g} {medians[key] / baseline:>17.2f}x  {per_process}")


if __name__ == "__main__":
    main()
