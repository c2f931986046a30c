"""Which ONNX files a bench names: paths, `light:NAME` for the ONNX package's test models, or
`kernel:matmulN` / `kernel:convN` for one-operator models (an NxNxN matmul; a 64->64 3x3 conv2d on
NxN), written on first use to logs/bench/kernels/."""

from __future__ import annotations

import re
from pathlib import Path

from benchlib.machine import ROOT
from harl.errors import HarlError

LIGHT_PREFIX = "light:"
KERNEL_PREFIX = "kernel:"
KERNELS_DIR = ROOT / "logs" / "bench" / "kernels"


def light_models_dir() -> Path:
    """onnx/backend/test/data/light/ of the installed ONNX package (constant weights)."""
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_model_names() -> list[str]:
    return sorted(p.stem.removeprefix("light_") for p in light_models_dir().glob("light_*.onnx"))


def resolve_model(spec: str) -> Path:
    """A path to an existing ONNX file for `spec`."""
    if spec.startswith(KERNEL_PREFIX):
        return kernel_model(spec[len(KERNEL_PREFIX):])
    if spec.startswith(LIGHT_PREFIX):
        name = spec[len(LIGHT_PREFIX):]
        path = light_models_dir() / f"light_{name}.onnx"
        if not path.is_file():
            raise HarlError(f"no ONNX light model {name!r}; choose from: "
                            f"{', '.join(light_model_names())}")
        return path
    path = Path(spec)
    if not path.is_file():
        raise HarlError(f"model file not found: {spec}")
    return path


def kernel_model(name: str) -> Path:
    """The ONNX file of a one-operator kernel named like matmul512 or conv56."""
    from benchlib.roofline import conv_kernel, matmul_kernel

    match = re.fullmatch(r"(matmul|conv)(\d+)", name)
    if match is None:
        raise HarlError(f"unknown kernel {name!r}; expected matmulN or convN, e.g. matmul512")
    KERNELS_DIR.mkdir(parents=True, exist_ok=True)
    make = matmul_kernel if match[1] == "matmul" else conv_kernel
    return make(KERNELS_DIR, int(match[2])).path


def model_label(path: Path) -> str:
    """Short name for tables and folders: the file stem without the light_ prefix."""
    return path.stem.removeprefix("light_")


def count_tasks(path: Path, target: str | None) -> int:
    """Number of tuning tasks harl extracts from the model (for per-task budgets)."""
    from harl.frontend.onnx_model import import_to_relax, load_onnx
    from harl.frontend.tasks import extract_tasks
    from harl.target import is_gpu, parse_target

    target = parse_target(target)
    return len(extract_tasks(import_to_relax(load_onnx(path), not is_gpu(target)), target))
