"""Exporting a torch module to ONNX the way harl's model scripts do: eval mode, batch norms with
running statistics of their own (freshly made ones are the identity), torch's TorchScript
exporter (`dynamo=False`), opset 17 unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

OPSET = 17


def export_torch(module: nn.Module, inputs: tuple, path: Path, *, input_names: list[str],
                 opset: int | None = OPSET, dynamic_axes: dict | None = None) -> Path:
    """Write `module` run on `inputs` to `path` (opset None: the exporter's default); the batch
    norms' running means and variances are drawn from torch's generator first."""
    module.eval()
    for layer in module.modules():
        if isinstance(layer, nn.BatchNorm1d | nn.BatchNorm2d):
            layer.running_mean.uniform_(-0.5, 0.5)
            layer.running_var.uniform_(0.5, 2.0)
    torch.onnx.export(module, inputs, str(path), input_names=input_names, opset_version=opset,
                      dynamo=False, dynamic_axes=dynamic_axes)
    return path
