"""harl's three learning agents, one per level of the search, free of TVM types.

- task_allocator: which task gets the next batch of trials;
- sketch_chooser: how a task's batch is spread across its design-space sketches;
- tile_tuner: which sampling decisions (tile factors, unroll) to try inside a sketch.
"""
