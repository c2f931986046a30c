"""The run's trial budget, kept by every task's search wrapper: the last batch is cut to it."""

from conftest import matmul_module
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from harl.stoppable_search import StoppableSearch, TrialBudget


class FixedBatches:
    """A stand-in strategy: batches of `size` candidates, counting the batches asked for."""

    def __init__(self, size: int) -> None:
        self.size, self.asked = size, 0
        self.candidate = ms.MeasureCandidate(s_tir.Schedule(matmul_module(4)), [])

    def generate_measure_candidates(self):
        self.asked += 1
        return [self.candidate] * self.size


def never_stop(_task_id: int) -> bool:
    return False


def test_tasks_share_the_budget_and_the_last_batch_is_a_prefix():
    budget = TrialBudget(7)
    inners = [FixedBatches(3), FixedBatches(3)]
    searches = [StoppableSearch(inner, i, should_stop=never_stop, budget=budget)
                for i, inner in enumerate(inners)]
    sizes = [len(searches[i % 2].generate_measure_candidates()) for i in range(3)]
    assert sizes == [3, 3, 1] and budget.left == 0
    assert searches[1].generate_measure_candidates() is None  # spent: the task ends
    assert searches[0].generate_measure_candidates() is None
    assert [inner.asked for inner in inners] == [2, 1]  # a spent budget asks for no batch


def test_no_budget_leaves_batches_whole():
    search = StoppableSearch(FixedBatches(5), 0, should_stop=never_stop)
    assert len(search.generate_measure_candidates()) == 5
