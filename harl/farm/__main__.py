"""`python -m harl.farm up|status|down`: a loopback TVM RPC device farm."""

from __future__ import annotations

import argparse
import sys

from harl.errors import HarlError
from harl.farm.farm import alive_processes, down, up
from harl.farm.state import farm_dir, load_state, state_path
from harl.farm.tracker import key_statuses, tracker_summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harl.farm",
        description="Start, inspect and stop a TVM RPC tracker with N servers on this machine "
                    f"(state and logs in $HARL_FARM_DIR, default {farm_dir()}).")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start a tracker and N servers in the background")
    start.add_argument("--servers", type=int, required=True, help="number of RPC servers")
    start.add_argument("--key", required=True, help="device key the servers register under")
    start.add_argument("--host", default="127.0.0.1",
                       help="address the tracker and servers bind (default 127.0.0.1)")
    start.add_argument("--port", type=int, default=9190, help="tracker port (default 9190)")
    start.add_argument("--fork", action=argparse.BooleanOptionalAction, default=None,
                       help="servers fork a process per session (default: yes, unless a GPU is "
                            "visible: a forked session cannot initialise CUDA, so they spawn)")
    commands.add_parser("status", help="servers per key, free and busy, from the tracker")
    commands.add_parser("down", help="stop every process of the farm and wait for them")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    return parser


def print_status(out=sys.stdout) -> int:
    """Print the farm's processes and the tracker's view; 1 when no farm answers."""
    state = load_state()
    if state is None:
        print(f"no farm is up (no {state_path()})", file=out)
        return 1
    alive = {p.pid for p in alive_processes(state)}
    print(f"tracker {state.host}:{state.port}  pid {state.tracker.pid}  "
          f"{'running' if state.tracker.pid in alive else 'NOT RUNNING'}", file=out)
    for server in state.servers:
        core = "unpinned" if server.core is None else f"core {server.core}"
        print(f"  server pid {server.pid}  port {server.port}  {core}  "
              f"{'running' if server.pid in alive else 'NOT RUNNING'}", file=out)
    try:
        statuses = key_statuses(tracker_summary(state.host, state.port, timeout_s=3.0))
    except HarlError as err:
        print(f"tracker: {err}", file=out)
        return 1
    if not statuses:
        print("no server registered with the tracker", file=out)
    for status in statuses.values():
        print(f"key {status.key!r}: {status.servers} servers, {status.free} free, "
              f"{status.busy} busy, {status.pending} requests waiting", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "up":
            no_fork = None if args.fork is None else not args.fork  # None: up() asks TVM
            state = up(args.servers, key=args.key, host=args.host, port=args.port, no_fork=no_fork)
            cores = [s.core for s in state.servers]
            pinning = ("pinned to cores " + ", ".join(map(str, cores))
                       if None not in cores else "unpinned (more servers than cores)")
            print(f"farm up: tracker {state.host}:{state.port}, {len(state.servers)} servers "
                  f"under key {state.key!r}, {pinning}"
                  + (", each session a spawned process (--no-fork)" if state.no_fork else ""))
            print(f"tune with: python -m harl.tune MODEL.onnx --rpc-tracker "
                  f"{state.host}:{state.port} --rpc-key {state.key}")
            return 0
        if args.command == "status":
            return print_status()
        stopped = down()
        print(f"farm down: stopped {stopped} processes" if stopped else "no farm is up")
        return 0
    except HarlError as err:
        if args.debug:
            raise
        print(f"harl: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("\nharl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
