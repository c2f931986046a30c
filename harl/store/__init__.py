"""What harl learns on one model, kept for the next: a user-level store of measured programs.

Each tuning run adds its measured records (program features and latencies, per workload) to a
store directory under the user's cache, in a folder keyed by the target and TVM version; a
later run on the same target trains a cost model on them and, where it ranks held-out models
better than the prior harl ships, uses it to rank each task's first samples. See
harl.store.store for the lifecycle and harl.store.key for what keeps entries apart.
"""
