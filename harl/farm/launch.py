"""`python -m harl.farm.launch MODULE ARG...`: run one of TVM's tools without torch.

tvm_ffi imports torch whenever it is installed (2.7 of `import tvm`'s 5.2 s on the 2-core
hosts), and a farm starts a tracker and its servers at once, on the same few cores. Neither
uses torch: the servers only load and time the built kernels.
"""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    sys.modules["torch"] = None  # `import torch` raises ImportError; tvm_ffi goes on without it
    module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
