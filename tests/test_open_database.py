"""Opening a work dir's database: every record loads, whatever TVM's replays write."""

import tvm_ffi
from conftest import global_average_pool
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from harl.database import LOADING_SUFFIX, RECORD_FILE, open_database, read_database
from harl.target import parse_target
from harl.tvm_adapter import pinned_statements


def records_that_rewrite_their_workload(work_dir) -> int:
    """A database whose first record vectorises T_divide after annotating the root block (a
    replay TVM writes into the workload's module), then records that read T_divide's four
    loops; how many records it holds."""
    database = open_database(work_dir)
    workload = database.commit_workload(global_average_pool())
    held = pinned_statements(workload.mod)  # so that making the traces leaves it alone
    target, args = parse_target("llvm"), ArgInfo.from_prim_func(workload.mod["main"])
    rewriting = Schedule(workload.mod)
    rewriting.annotate(rewriting.get_sblock("root"), "meta_schedule.vectorize", 64)
    rewriting.vectorize(rewriting.fuse(*rewriting.get_loops(rewriting.get_sblock("T_divide"))[2:]))
    schedules = [rewriting]
    for k in range(8):
        reading = Schedule(workload.mod)
        loops = reading.get_loops(reading.get_sblock("T_divide"))
        assert len(loops) == 4
        reading.parallel(loops[1]) if k % 2 else reading.unroll(loops[3])
        schedules.append(reading)
    for k, sch in enumerate(schedules):
        database.commit_tuning_record(
            ms.database.TuningRecord(sch.trace, workload, [1e-3 * (k + 1)], target, args))
    held.clear()
    return len(schedules)


def test_every_record_loads_against_its_unchanged_workload(tmp_path):
    count = records_that_rewrite_their_workload(tmp_path)
    lines = (tmp_path / RECORD_FILE).read_bytes()
    database = open_database(tmp_path)
    assert len(database) == count
    assert (tmp_path / RECORD_FILE).read_bytes() == lines  # written back as it was
    assert not (tmp_path / (RECORD_FILE + LOADING_SUFFIX)).exists()
    (workload,) = {record.workload for record in database.get_all_tuning_records()}
    assert tvm_ffi.structural_equal(workload.mod, global_average_pool())
    best = database.get_top_k(workload, 1)[0]
    assert [float(s) for s in best.run_secs] == [1e-3]


def test_a_load_stopped_half_way_is_taken_back_whole(tmp_path):
    count = records_that_rewrite_their_workload(tmp_path)
    records = tmp_path / RECORD_FILE
    aside = tmp_path / (RECORD_FILE + LOADING_SUFFIX)
    lines = records.read_bytes()
    records.replace(aside)  # as a load leaves it when killed after writing two records back
    records.write_bytes(b"".join(lines.splitlines(keepends=True)[:2]))
    assert len(open_database(tmp_path)) == count
    assert records.read_bytes() == lines and not aside.exists()


def test_reading_leaves_the_files_alone_and_a_line_being_written_out(tmp_path):
    count = records_that_rewrite_their_workload(tmp_path)
    records = tmp_path / RECORD_FILE
    lines = records.read_bytes()
    records.write_bytes(lines + lines.splitlines(keepends=True)[0][:40])  # a run's next line
    before = records.stat()
    database = read_database(tmp_path)
    assert len(database) == count
    assert records.stat().st_mtime_ns == before.st_mtime_ns
    assert not (tmp_path / (RECORD_FILE + LOADING_SUFFIX)).exists()
    (workload,) = {record.workload for record in database.get_all_tuning_records()}
    assert tvm_ffi.structural_equal(workload.mod, global_average_pool())
