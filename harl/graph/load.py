"""The Relax module of an ONNX file, as harl tunes it (weights bound as constants)."""

from __future__ import annotations

from pathlib import Path


def relax_of_onnx(path: Path | str, *, input_shapes: dict[str, tuple[int, ...]] | None = None,
                  fast_math: bool = True):
    """Load, check and import an ONNX model with harl's frontend (see
    harl.frontend.onnx_model.import_model); returns the Relax IRModule."""
    from harl.frontend.onnx_model import import_to_relax, load_onnx

    return import_to_relax(load_onnx(Path(path), input_shapes), fast_math)
