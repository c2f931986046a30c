"""harl's search replays thousands of traces per task: none of them may corrupt TVM's memory.

On a global average pool (SqueezeNet's `mean` task) TVM wrote postprocs' loop rewrites into the
task's module itself (see `tvm_adapter.pinned_statements`), and the process died with a double
free or an `exit()` from TVM within two batches; the search runs in a child process so that
such a crash fails this test instead of the suite.
"""

import subprocess
import sys

SEARCH_ON_A_GLOBAL_AVERAGE_POOL = """
import random
import tvm
import tvm_ffi
from tvm import te, topi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult
from harl.search.cost_prior import load_cost_prior
from harl.search.harl_search import HarlSearchStrategy
from harl.search.program_scorer import ProgramScorer
from harl.search.search_config import HarlSearchConfig
from harl.target import parse_target
from harl.tvm_adapter import python_instance
from harl.tvm_env import load_tensor_intrinsics

x = te.placeholder((1, 1000, 13, 13), name="x")
y = topi.divide(topi.sum(x, axis=[2, 3], keepdims=True), 169.0)
target = parse_target(None)
load_tensor_intrinsics(target)
context = ms.TuneContext(mod=tvm.IRModule({"main": te.create_prim_func([x, y])}), target=target,
                         space_generator="post-order-apply", task_name="mean",
                         num_threads=1).clone()
scorer = ProgramScorer(python_instance(ms.cost_model.XGBModel(num_tuning_cores=1)),
                       load_cost_prior(target))
unscheduled = tvm_ffi.structural_hash(context.mod)
rng = random.Random(0)
for seed in (1, 2):
    strategy = HarlSearchStrategy(HarlSearchConfig(), seed=seed, task_id=0, scorer=scorer)
    strategy._initialize_with_tune_context(context)
    strategy.pre_tuning(1000, 10, context.generate_design_space(), None,
                        ms.cost_model.RandomModel())
    for _ in range(2):
        batch = strategy.generate_measure_candidates()
        strategy.notify_runner_results(
            batch, [RunnerResult([rng.uniform(1e-5, 1e-4)], None) for _ in batch])
assert tvm_ffi.structural_hash(context.mod) == unscheduled, "the search rewrote the task"
print("searched")
"""


def test_searching_a_reduction_with_rfactor_sketches_does_not_crash_tvm():
    done = subprocess.run([sys.executable, "-c", SEARCH_ON_A_GLOBAL_AVERAGE_POOL],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "searched" in done.stdout, done.stderr[-2000:]
