"""Which sketch each measured candidate of a tuning run came from, and each sketch's best.

    python tools/sketch_usage.py WORK_DIR... [--min-records N]

For every workload of each work dir's database with at least N searched records, one line per
sketch harl searches (TVM's design spaces, then their serial variants for small tasks): how many
records it holds and its best latency. A record belongs to the sketch whose instructions are the
longest prefix of its trace (harl.search.stored_elites). MetaSchedule's runs read the same way;
their serial sketches stay empty. It shows, for one, whether harl's sketch chooser left a task's
best sketch after a few poor samples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere


def sketch_usage(work_dir: Path, min_records: int = 1) -> list[dict]:
    """Per workload of the work dir: its FLOPs, searched records, how many of its sketches are
    TVM's design spaces (the rest are their serial variants), and per sketch (records, best
    seconds or None)."""
    from tvm.s_tir import meta_schedule as ms

    from harl.frontend.tasks import task_flop
    from harl.naive_nests import is_naive_trace
    from harl.resume import FAILED_RUN_SECS, record_latency_s
    from harl.search.search_config import HarlSearchConfig
    from harl.search.sketches import sketch_traces
    from harl.search.stored_elites import stored_elites
    from harl.target import local_cpu_count

    database = ms.database.JSONDatabase(str(work_dir / "database_workload.json"),
                                        str(work_dir / "database_tuning_record.json"),
                                        allow_missing=False)
    by_workload: dict[str, list] = {}
    for record in database.get_all_tuning_records():
        key = ms.utils.shash2hex(record.workload.mod)
        by_workload.setdefault(key, []).append(record)
    usage = []
    for records in by_workload.values():
        searched = [r for r in records if r.trace is not None and not is_naive_trace(r.trace)]
        if len(searched) < max(1, min_records):
            continue
        mod = records[0].workload.mod
        context = ms.TuneContext(mod=mod, target=records[0].target,
                                 space_generator="post-order-apply",
                                 num_threads=local_cpu_count()).clone()
        spaces = context.generate_design_space()
        traces = sketch_traces(mod, spaces, HarlSearchConfig().serial_max_flop)
        stored = stored_elites(database, mod, traces, len(records))
        sketches = []
        for index in range(len(traces)):
            latencies = [latency for latency, _ in stored.get(index, [])]
            finite = [x for x in latencies if x < FAILED_RUN_SECS]
            sketches.append((len(latencies), min(finite) if finite else None))
        usage.append({"flop": task_flop(mod), "records": len(searched), "spaces": len(spaces),
                      "best_s": min(record_latency_s(r) for r in searched),
                      "sketches": sketches})
    return usage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work_dirs", nargs="+", type=Path)
    parser.add_argument("--min-records", type=int, default=1,
                        help="leave out workloads with fewer searched records (default 1)")
    args = parser.parse_args(argv)
    for work_dir in args.work_dirs:
        if not (work_dir / "database_tuning_record.json").is_file():
            print(f"sketch_usage: error: {work_dir} holds no tuning database", file=sys.stderr)
            return 2
    for work_dir in args.work_dirs:
        for index, workload in enumerate(sketch_usage(work_dir, args.min_records)):
            print(f"{work_dir} workload {index}: {workload['flop'] / 1e6:.3g} MFLOP, "
                  f"{workload['records']} searched records, best "
                  f"{workload['best_s'] * 1e6:.4g} us")
            for sketch, (count, best) in enumerate(workload["sketches"]):
                best_text = "-" if best is None else f"{best * 1e6:.4g} us"
                kind = "" if sketch < workload["spaces"] else " (serial)"
                print(f"  sketch {sketch}{kind}: {count} records, best {best_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
