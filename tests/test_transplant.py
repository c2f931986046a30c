"""A state carried between sketches that draw the same decisions."""

from harl.agents.tile_tuner import Site
from harl.search.transplant import carried_state

TILES = [Site("tile", 4, 64), Site("tile", 2)]
PARALLEL = Site("parallel", 0)
UNROLL = Site("categorical", 4)
STATE = ((2, 4, 2, 4), (8, 8), 16, 3)


def test_a_sibling_with_the_same_sites_takes_the_state_as_it_is():
    sites = [*TILES, PARALLEL, UNROLL]
    options = [[], [], [1, 2, 4, 8, 16, 32], []]
    assert carried_state(sites, STATE, sites, options) == STATE


def test_a_parallel_extent_is_dropped_added_or_replaced_by_the_targets_own():
    parallel, serial = [*TILES, PARALLEL, UNROLL], [*TILES, UNROLL]
    assert carried_state(parallel, STATE, serial, [[], [], []]) == ((2, 4, 2, 4), (8, 8), 3)
    serial_state = ((2, 4, 2, 4), (8, 8), 3)
    options = [[], [], [1, 2, 4, 8], []]
    assert carried_state(serial, serial_state, parallel, options) == (*serial_state[:2], 8, 3)
    assert carried_state(parallel, STATE, parallel, options)[2] == 8  # 16: not the target's


def test_sketches_whose_decisions_differ_take_nothing():
    sites = [*TILES, PARALLEL, UNROLL]
    options = [[], [], [16], []]
    other_tiles = [Site("tile", 4, 16), Site("tile", 2), PARALLEL, UNROLL]
    assert carried_state(sites, STATE, other_tiles, options) is None  # another tile site
    assert carried_state(sites, STATE, [*TILES, PARALLEL], [[], [], [16]]) is None
    located = [*TILES, Site("compute_location", 0)]
    assert carried_state(located, ((2, 4, 2, 4), (8, 8), 2), located, [[], [], [0, 1]]) is None
    assert carried_state(located, ((2, 4, 2, 4), (8, 8), 1), located,
                         [[], [], [0, 1]]) == ((2, 4, 2, 4), (8, 8), 1)
