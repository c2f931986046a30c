"""The key of a store folder: what a measurement depends on, so that nothing is reused across
CPUs, GPUs or TVM versions (Triton's autotuner keys its cache the same way)."""

from __future__ import annotations

import hashlib
import json

FORMAT_VERSION = 1
"""of the store's files; a new layout makes a new folder, never a misread one"""

FEATURES = "PerStoreFeature"
"""the program features the store keeps (TVM's defaults, one row per buffer store)"""


def store_key(target) -> dict:
    """What a measured latency depends on beside the program: the target as TVM prints it (the
    CPU's mcpu, mattr and core count, a GPU's arch and limits), the CPU's instruction set, the
    TVM version, and the store's format and features."""
    import tvm

    from harl.search.cost_prior import target_arch

    return {"target": json.loads(str(target)) if str(target).startswith("{") else str(target),
            "arch": target_arch(target), "tvm_version": tvm.__version__,
            "features": FEATURES, "format": FORMAT_VERSION}


def key_digest(key: dict) -> str:
    """The folder name of `key`: 16 hex digits of its canonical JSON's SHA-256."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
