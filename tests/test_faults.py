"""Faults a run must survive: a second run on its work dir, damage anywhere in its files, bad
input, SIGTERM and SIGHUP, a full disk, and `kill -9` at any instant (the slow crash loop)."""

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
import tvm_ffi
from conftest import (
    EXAMPLES,
    ROOT,
    _is_naive,
    fill_database,
    harl_tune_here,
    matmul_module,
    save_model,
    trial_record_lines,
)
from onnx import TensorProto, helper, numpy_helper
from test_failure_isolation import FakeBuilder, FakeRunner
from tvm.s_tir import meta_schedule as ms

from harl.agents import checkpoint
from harl.config import MeasureConfig
from harl.database import RECORD_FILE, WORKLOAD_FILE, open_database
from harl.database import durable as durable_module
from harl.database.repair import load_database
from harl.frontend.tasks import TuningTask
from harl.interrupt import interrupt_flag
from harl.loop import LoopSettings, tune_tasks
from harl.resume import RUN_FILES, RunManifest, claim_work_dir
from harl.search import SearchPlan
from harl.target import parse_target
from harl.workdir_lock import LOCK_FILE, work_dir_lock

# -- one run per work dir ------------------------------------------------------------------------

HOLD_LOCK = ("import sys, time\nfrom harl.workdir_lock import work_dir_lock\n"
             "with work_dir_lock(sys.argv[1]):\n"
             "    print('held', flush=True)\n    time.sleep(600)\n")


def test_a_second_run_on_a_locked_work_dir_exits_at_once_naming_the_holder(tiny_matmul, tmp_path):
    work_dir = tmp_path / "run"
    work_dir.mkdir()
    for name in (RECORD_FILE, "history.csv"):  # an earlier run's files, which --fresh moves
        (work_dir / name).write_text("x\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(work_dir)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        for fresh in ((), ("--fresh",)):
            start = time.monotonic()
            result = harl_tune_here(tiny_matmul, "--trials", 2, "--work-dir", work_dir, *fresh)
            assert time.monotonic() - start < 30
            assert result.returncode == 2
            assert result.stderr == (f"harl: error: work dir {work_dir} is in use by another harl "
                                     f"run (pid {holder.pid}); wait for it to end, or use another "
                                     "--work-dir\n")
            # nothing moved aside or written
            assert sorted(p.name for p in work_dir.iterdir()) == sorted(
                [LOCK_FILE, RECORD_FILE, "history.csv"])
            assert (work_dir / RECORD_FILE).read_text() == "x\n"
    finally:
        holder.kill()  # kill -9: the kernel releases the lock with the process
        holder.wait()
    with work_dir_lock(work_dir):
        assert (work_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert LOCK_FILE not in RUN_FILES


# -- a damaged database --------------------------------------------------------------------------

def _damage(work_dir, how: str) -> tuple[int, int]:
    """Damage the database of `fill_database(work_dir, {16: 3 records, 8: 2 records})`;
    returns (records kept, lines dropped)."""
    workloads, records = work_dir / WORKLOAD_FILE, work_dir / RECORD_FILE
    lines = records.read_bytes().splitlines(keepends=True)
    if how == "cut last line":
        records.write_bytes(b"".join(lines)[:-40])
        return 4, 1
    if how == "corrupt middle line":
        records.write_bytes(b"".join(lines[:2] + [b"[0, [garbage\n"] + lines[2:]))
        return 5, 1
    if how == "zeros in the middle":  # what a power loss can leave
        records.write_bytes(b"".join(lines[:1] + [b"\0" * 300 + b"\n"] + lines[1:]))
        return 5, 1
    if how == "missing workload index":
        records.write_bytes(b"".join(lines + [b"[7" + lines[0][2:]]))
        return 5, 1
    if how == "short workload file":
        workloads.write_bytes(workloads.read_bytes().splitlines(keepends=True)[0])
        return 3, 2
    if how == "trace TVM cannot replay":
        records.write_bytes(b"".join(lines[:1] + [lines[1].replace(b'"GetSBlock"', b'"GetX"')]
                                     + lines[2:]))
        return 4, 1
    if how == "corrupt first workload":  # the records of the second follow it to line 0
        wl = workloads.read_bytes().splitlines(keepends=True)
        workloads.write_bytes(b'["x", "not base64"]\n' + wl[1])
        return 2, 4  # its line and its 3 records
    raise ValueError(how)


@pytest.mark.parametrize("how", ["cut last line", "corrupt middle line", "zeros in the middle",
                                 "missing workload index", "short workload file",
                                 "trace TVM cannot replay", "corrupt first workload"])
def test_a_database_damaged_anywhere_loads_with_every_good_record_and_one_warning(
        tmp_path, harl_messages, how):
    fill_database(tmp_path, {16: [[1e-3], [2e-3], [3e-3]], 8: [[1e-4], [2e-4]]})
    intact = [r.run_secs[0].value for r in open_database(tmp_path).get_all_tuning_records()]
    kept, dropped = _damage(tmp_path, how)
    damaged = {name: (tmp_path / name).read_bytes() for name in (WORKLOAD_FILE, RECORD_FILE)}
    records = load_database(tmp_path).get_all_tuning_records()
    said = harl_messages()
    assert len(records) == kept
    assert {r.run_secs[0].value for r in records} <= set(intact)
    assert len(said) == 1 and said[0].startswith("harl: warning: damaged lines in ")
    counted = sum(int(part.split(" line")[0]) for part in
                  said[0].split("dropped ")[1].split(";")[0].split(", "))
    assert counted == dropped
    backups = sorted(tmp_path.glob("*.corrupt-*"))
    assert backups and all(b.name in said[0] for b in backups)
    for backup in backups:  # the damaged copy, as it was
        assert backup.read_bytes() == damaged[backup.name.split(".corrupt-")[0]]
    # the records that stayed are where a fresh load finds them, without a word
    assert len(load_database(tmp_path).get_all_tuning_records()) == kept
    assert harl_messages() == said


def test_a_corrupt_workload_line_renumbers_the_records_after_it(tmp_path):
    fill_database(tmp_path, {16: [[1e-3]], 8: [[1e-4], [2e-4]]})
    _damage(tmp_path, "corrupt first workload")
    records = load_database(tmp_path).get_all_tuning_records()
    assert sorted(r.run_secs[0].value for r in records) == pytest.approx([1e-4, 2e-4])
    assert all(tvm_ffi.structural_equal(r.workload.mod, matmul_module(8)) for r in records)
    assert all(line.startswith("[0,") for line in
               (tmp_path / RECORD_FILE).read_text().splitlines())


def test_a_real_run_resumes_past_a_corrupt_line_in_the_middle_of_its_log(tiny_matmul,
                                                                          tmp_path):
    args = (tiny_matmul, "--trials", 2, "--trials-per-batch", 2, "--work-dir", tmp_path,
            "--no-evaluate")
    assert harl_tune_here(*args).returncode == 0
    path = tmp_path / RECORD_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:1] + [b'[0, [[["GetSBlock", [], \x00\n'] + lines[1:]))
    result = harl_tune_here(*args[:2], 4, *args[3:])
    assert result.returncode == 0, result.stderr
    (warning,) = [line for line in result.stdout.splitlines() if "warning" in line]
    assert f"dropped 1 line of {RECORD_FILE}" in warning
    assert "resuming: 2 trials already in the database, 2 to go" in result.stdout
    assert path.read_bytes().startswith(b"".join(lines))
    assert len(trial_record_lines(tmp_path)) == 4


def test_a_database_tvm_still_cannot_load_is_moved_aside_whole(tmp_path, harl_messages,
                                                               monkeypatch):
    from harl.database import repair

    fill_database(tmp_path, {16: [[1e-3]]})
    intact = (tmp_path / RECORD_FILE).read_bytes()
    failures = []

    def open_or_fail(work_dir):
        if len(failures) < 2:  # the first load, and the one after each line was checked
            failures.append(work_dir)
            raise RuntimeError("a damage no line check finds")
        return open_database(work_dir)

    monkeypatch.setattr(repair, "open_database", open_or_fail)
    assert len(load_database(tmp_path).get_all_tuning_records()) == 0
    said = harl_messages()
    (backup,) = tmp_path.glob(RECORD_FILE + ".corrupt-*")
    assert len(said) == 1 and "TVM cannot load the database" in said[0]
    assert "a damage no line check finds" in said[0] and backup.name in said[0]
    assert backup.read_bytes() == intact


# -- history.csv and the agents' checkpoints ---------------------------------------------------

def _manifest(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"model")
    return RunManifest.of(model, parse_target(None), "harl", True)


def test_history_damaged_anywhere_keeps_its_good_rows(tmp_path, harl_messages):
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    header = "time_s,task_id,task,trial\n"
    good = ["1.0,0,a,1\n", "2.0,1,b,1\n", "3.0,0,a,2\n"]
    (tmp_path / "history.csv").write_bytes(
        (header + good[0] + "2.5,x\n" + good[1]).encode() + b"\0" * 50 + b"\n"
        + good[2].encode() + b"4.0,0,a")
    before = len(harl_messages())
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    said = harl_messages()[before:]
    assert len(said) == 1 and "dropped 3 lines of history.csv" in said[0]
    assert (tmp_path / "history.csv").read_text() == header + "".join(good)
    (backup,) = tmp_path.glob("history.csv.corrupt-*")
    assert backup.read_bytes().endswith(b"4.0,0,a")


def test_a_cut_metrics_line_is_dropped_so_the_next_starts_its_own(tmp_path, harl_messages):
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"ste')
    (tmp_path / "history.csv").write_text("time_s,task_id\n1.0,0\n2.0")
    before = len(harl_messages())
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    said = harl_messages()[before:]
    assert len(said) == 1  # one warning for both files
    assert "1 line of history.csv, 1 line of metrics.jsonl" in said[0]
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'


def test_a_history_whose_header_is_damaged_is_moved_aside(tmp_path, harl_messages):
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    (tmp_path / "history.csv").write_bytes(b"\0\0\0\n1.0,0,a,1\n")
    before = len(harl_messages())
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    said = harl_messages()[before:]
    assert len(said) == 1 and not (tmp_path / "history.csv").exists()
    assert len(list(tmp_path.glob("history.csv.corrupt-*"))) == 1


def test_a_damaged_checkpoint_is_set_aside_and_its_agent_starts_afresh(tmp_path, harl_messages):
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    agents = tmp_path / checkpoint.AGENTS_DIR
    agents.mkdir()
    checkpoint.save_arrays(agents / checkpoint.POLICY_FILE, {"w": np.zeros(3)})
    (agents / checkpoint.POLICY_FILE).write_bytes(
        (agents / checkpoint.POLICY_FILE).read_bytes()[:40])  # cut short
    (agents / checkpoint.ALLOCATOR_FILE).write_text('[{"weight": 1.0, "fl')
    before = len(harl_messages())
    claim_work_dir(tmp_path, _manifest(tmp_path), fresh=False)
    said = harl_messages()[before:]
    assert len(said) == 2 and all("checkpoint" in line and "starts afresh" in line
                                  for line in said)
    assert sorted(p.name.split(".corrupt-")[0] for p in agents.iterdir()) == sorted(
        [checkpoint.POLICY_FILE, checkpoint.ALLOCATOR_FILE])
    assert not (agents / checkpoint.POLICY_FILE).exists()


def test_a_checkpoint_that_loads_but_does_not_fit_its_agent_is_not_a_crash(tmp_path, caplog):
    from harl.search.harl import harl_plan

    agents = tmp_path / checkpoint.AGENTS_DIR
    agents.mkdir()
    checkpoint.save_arrays(agents / checkpoint.POLICY_FILE, {"w": np.zeros(3)})
    checkpoint.save_json(agents / checkpoint.ALLOCATOR_FILE, [{"weight": 1.0}])
    plan = harl_plan(seed=0, num_cores=1, tasks=[TuningTask("t", mod=None, weight=1.0,
                                                            flop=1e6)])
    plan.on_start(tmp_path)
    assert "tile policy's checkpoint does not fit" in caplog.text
    assert "allocator's checkpoint is damaged" in caplog.text
    assert plan.allocator.tasks[0].batches == 0
    plan.metrics.close()


# -- bad input -----------------------------------------------------------------------------------

def _matmul_model(path, opset: int = 17, y_shape=(1, 8)):
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((16, 8)).astype("float32"), "W")
    return save_model(path, [helper.make_node("MatMul", ["x", "W"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
                      [weight], opset=opset)


def _external(tmp_path, damage: str):
    path = tmp_path / "model.onnx"
    model = onnx.load(str(_matmul_model(path)))
    onnx.save(model, str(path), save_as_external_data=True, location="model.weights",
              size_threshold=0)
    weights = tmp_path / "model.weights"
    if damage == "missing":
        weights.unlink()
        return path
    weights.write_bytes(weights.read_bytes()[:100])
    if damage == "cut, its length not recorded":  # the tensor takes the rest of the file
        model = onnx.load(str(path), load_external_data=False)
        for tensor in model.graph.initializer:
            kept = [entry for entry in tensor.external_data if entry.key != "length"]
            del tensor.external_data[:]
            tensor.external_data.extend(kept)
        onnx.save(model, str(path))
    return path


BAD_INPUTS = {
    "external weights missing": (lambda d: _external(d, "missing"),
                                 "its weights, kept in a file beside it, cannot be read"),
    "external weights cut short": (lambda d: _external(d, "cut"),
                                   "cannot be read: External data length (512) exceeds"),
    "external weights cut short, their length not recorded": (
        lambda d: _external(d, "cut, its length not recorded"),
        "its weights' file holds 100 bytes of tensor 'W', which needs 512"),
    "a directory": (lambda d: d, "is a directory"),
    "a device": (lambda d: "/dev/null", "is not a regular file"),
    "an opset from the future": (lambda d: _matmul_model(d / "m.onnx", opset=99),
                                 "uses ONNX opset 99, newer than"),
    "declared outputs that inference contradicts": (
        lambda d: _matmul_model(d / "m.onnx", y_shape=(1, 9)),
        "output 'y' is declared with shape [1, 9], but its graph computes [1, 8]"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case):
    make, expected = BAD_INPUTS[case]
    model = make(tmp_path)
    work_dir = tmp_path / "work"
    result = harl_tune_here(model, "--trials", 2, "--work-dir", work_dir)
    assert result.returncode == 2
    assert result.stderr.startswith("harl: error: ") and result.stderr.count("\n") == 1
    assert expected in result.stderr
    assert not work_dir.exists()


# -- SIGTERM and SIGHUP --------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_set_the_flag_that_ctrl_c_sets(signum):
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt), interrupt_flag() as flag:
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 5
        while not flag.requested and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flag.requested
    assert signal.getsignal(signum) is before


def start_tuning(work_dir, trials: int, batch: int = 2) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harl.tune", str(EXAMPLES / "mlp.onnx"), "--trials", str(trials),
         "--trials-per-batch", str(batch), "--work-dir", str(work_dir), "--no-evaluate"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def test_sigterm_to_a_real_run_stops_it_as_ctrl_c_does(tmp_path):
    proc = start_tuning(tmp_path, trials=8)
    deadline = time.monotonic() + 400
    while not trial_record_lines(tmp_path):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # to the tuner alone, as `kill PID` does
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - start < 15
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "harl: interrupted; every trial measured" in stderr
    assert trial_record_lines(tmp_path)
    assert len(load_database(tmp_path).get_all_tuning_records()) >= 1


# -- a write that fails --------------------------------------------------------------------------

def _fake_loop(work_dir, trials: int = 8):
    plan = SearchPlan(task_scheduler=ms.task_scheduler.RoundRobin(),
                      cost_model=ms.cost_model.RandomModel(),
                      make_search_strategy=lambda _index: ms.search_strategy.ReplayTrace())
    return tune_tasks([TuningTask("mm", matmul_module(32), 1.0, 2 * 32**3)], parse_target(None),
                      plan, work_dir,
                      settings=LoopSettings(trials=trials, trials_per_batch=2, seed=0,
                                            num_cores=1),
                      measure=MeasureConfig(), builder=FakeBuilder(), runner=FakeRunner())


def test_each_batch_is_on_the_disk_before_the_next_starts(tmp_path, monkeypatch):
    synced = []
    real = durable_module.fsync_path

    def fsync_and_count(path):
        real(path)
        synced.append((path.name, len(trial_record_lines(tmp_path))))

    monkeypatch.setattr(durable_module, "fsync_path", fsync_and_count)
    _fake_loop(tmp_path)
    records_synced = [count for name, count in synced if name == RECORD_FILE]
    assert records_synced == [2, 4, 6, 8]  # after each batch of 2, its records were synced
    assert {name for name, _ in synced} == {RECORD_FILE, WORKLOAD_FILE, "history.csv"}


def _disk_full_after(fsyncs: int, monkeypatch) -> None:
    """Every fsync after the first `fsyncs` fails as on a full disk."""
    calls = []

    def full(path):
        calls.append(path)
        if len(calls) > fsyncs:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(durable_module, "fsync_path", full)


def test_a_full_disk_stops_the_run_with_the_os_error_and_a_loadable_database(tmp_path,
                                                                               monkeypatch):
    _disk_full_after(3, monkeypatch)  # the first batch's fsyncs pass
    with pytest.raises(OSError) as raised:
        _fake_loop(tmp_path)
    assert raised.value.errno == errno.ENOSPC  # the OSError itself, not TVM's RuntimeError
    assert len(load_database(tmp_path).get_all_tuning_records()) == 4


WRITE_LIMITED = """
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, "tests")
from test_faults import _fake_loop
from harl.database import RECORD_FILE
import harl.database.durable as durable
work_dir = Path(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
real = durable.fsync_path
def limit_after_the_first_batch(path):
    real(path)
    if path.name == RECORD_FILE:  # no file may grow past the record file's size now
        size = path.stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
durable.fsync_path = limit_after_the_first_batch
try:
    _fake_loop(work_dir)
except OSError as err:
    print("OSError", err)
"""


def test_a_record_write_that_tvm_drops_silently_stops_the_run(tmp_path):
    """TVM's C++ stream drops a failed append without a word: the batch's check catches it."""
    result = subprocess.run([sys.executable, "-c", WRITE_LIMITED, str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(ROOT), str(ROOT / "tests")])})
    assert "OSError" in result.stdout and "did not reach the database" in result.stdout, (
        result.stdout + result.stderr[-3000:])
    assert len(load_database(tmp_path).get_all_tuning_records()) == 2


def test_a_full_disk_in_a_real_run_is_one_line_and_the_rerun_resumes(tiny_matmul, tmp_path,
                                                                       monkeypatch):
    _disk_full_after(3, monkeypatch)  # the first batch's fsyncs pass
    args = (tiny_matmul, "--trials", 4, "--trials-per-batch", 2, "--work-dir", tmp_path,
            "--no-evaluate")
    result = harl_tune_here(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("harl: error: No space left on device: ")
    assert result.stderr.count("\n") == 1 and "resume with: python -m harl.tune" in result.stderr
    kept = trial_record_lines(tmp_path)
    assert kept and len(load_database(tmp_path).get_all_tuning_records()) >= len(kept)
    monkeypatch.undo()
    result = harl_tune_here(*args)
    assert result.returncode == 0, result.stderr
    assert f"resuming: {len(kept)} trials already in the database" in result.stdout
    assert trial_record_lines(tmp_path)[: len(kept)] == kept


# -- kill -9 at any instant ----------------------------------------------------------------------

@pytest.mark.slow
def test_kill_9_at_random_instants_loses_no_committed_record(tmp_path):
    """Runs killed at random instants (20 unless HARL_CRASH_LOOP_KILLS says), each resuming
    the last; then the run finishes at its trial cap, and every record committed before each
    kill is still there. The MLP takes about 1.5 s a trial here: the cap outlasts the kills."""
    trials, kills = 200, int(os.environ.get("HARL_CRASH_LOOP_KILLS", "20"))
    rng = random.Random(0)
    committed: list[str] = []
    for kill in range(kills):
        proc = start_tuning(tmp_path, trials=trials, batch=2)
        if kill % 2:  # at any instant of the run: starting, importing, searching, measuring
            time.sleep(rng.uniform(1.0, 30.0))
        else:  # while records are being written: just after the file grew
            size = _size(tmp_path / RECORD_FILE)
            deadline = time.monotonic() + 120
            while _size(tmp_path / RECORD_FILE) == size and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))
        assert proc.poll() is None, "the run ended before its kill: raise the trial cap"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        lines = (tmp_path / RECORD_FILE).read_text().splitlines() if (
            tmp_path / RECORD_FILE).exists() else []
        complete = [line for line in lines if _json_ok(line)]
        assert complete[: len(committed)] == committed  # nothing committed before is lost
        committed = complete
    proc = start_tuning(tmp_path, trials=trials, batch=2)
    stdout, stderr = proc.communicate(timeout=1200)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    assert f"resuming: {len(trial_record_lines_of(committed))} trials" in stdout
    final = (tmp_path / RECORD_FILE).read_text().splitlines()
    assert final[: len(committed)] == committed
    assert len(load_database(tmp_path).get_all_tuning_records()) == len(final)
    assert len(trial_record_lines(tmp_path)) == trials  # the cap, however often it resumed


def trial_record_lines_of(lines: list[str]) -> list[str]:
    return [line for line in lines if not _is_naive(json.loads(line)[1][0][0])]


def _size(path) -> int:
    return path.stat().st_size if path.exists() else 0


def _json_ok(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True
