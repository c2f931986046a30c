"""The graph agent's training corpus: small torch modules built from configs with random
weights, none of them a benchmark model (the examples, tasks/corpus.json's models): transformer
encoder layers (PyTorch's and BERT's) of several widths and heads, gated MLPs, and small CNNs
with parallel branches (inception- and fire-like blocks). They are exported as harl's model
scripts export (benchlib.export) and imported as harl imports a model.

Held out, by a rule on the order of the list fixed before any result: every third graph of
each family (the second, fifth, ...), so every family has graphs on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from benchlib import corpus_models as cm
from benchlib.export import export_torch


@dataclass(frozen=True)
class GraphSpec:
    """One corpus graph: a module built by `build()`, run on one float input of `shape`."""

    name: str
    family: str
    build: Callable[[], nn.Module]
    shape: tuple[int, ...]


class BranchyCnn(nn.Module):
    """A stem conv, parallel-branch blocks (`block(cin) -> (module, cout)` each), pooled, a
    linear head."""

    def __init__(self, stem: int, blocks: list[Callable[[int], tuple[nn.Module, int]]],
                 classes: int = 10):
        super().__init__()
        layers, cin = [cm.conv_bn(3, stem, 3)], stem
        for block in blocks:
            module, cin = block(cin)
            layers.append(module)
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


def inception(c1: int, c3r: int, c3: int, c5r: int, c5: int, pool: int):
    return lambda cin: (cm.Inception(cin, c1, c3r, c3, c5r, c5, pool), c1 + c3 + c5 + pool)


def fire(squeeze: int, expand: int):
    return lambda cin: (cm.Fire(cin, squeeze, expand), 2 * expand)


def encoder(width: int, heads: int, hidden: int, seq: int, activation: str, pre: bool):
    return GraphSpec(f"torch_encoder_w{width}h{heads}{'_pre' if pre else ''}", "encoder",
                     lambda: cm.TorchEncoder(layers=1, width=width, heads=heads, hidden=hidden,
                                             activation=activation, norm_first=pre),
                     (1, seq, width))


def bert_layer(width: int, heads: int, seq: int):
    return GraphSpec(f"bert_layer_w{width}h{heads}", "encoder",
                     lambda: cm.Bert(layers=1, width=width, heads=heads, seq=seq, vocab=None),
                     (1, seq, width))


def gated(width: int, hidden: int, layers: int, seq: int):
    return GraphSpec(f"gated_mlp_w{width}x{layers}", "gated-mlp",
                     lambda: cm.GatedMlp(width=width, hidden=hidden, layers=layers),
                     (1, seq, width))


def cnn(name: str, stem: int, blocks, size: int):
    return GraphSpec(name, "branchy-cnn", lambda: BranchyCnn(stem, blocks), (1, 3, size, size))


def specs() -> list[GraphSpec]:
    """Every corpus graph, in a fixed order."""
    return [
        bert_layer(32, 2, 8), encoder(32, 2, 64, 8, "relu", False),
        encoder(48, 2, 96, 8, "gelu", True), bert_layer(64, 4, 16),
        encoder(64, 4, 128, 16, "relu", True), encoder(64, 2, 256, 8, "gelu", False),
        encoder(96, 4, 192, 16, "relu", False), bert_layer(96, 2, 8),
        encoder(128, 4, 256, 8, "gelu", True),
        gated(32, 48, 1, 8), gated(48, 96, 2, 8), gated(64, 128, 1, 16),
        gated(96, 160, 1, 8), gated(128, 192, 1, 8), gated(64, 96, 2, 16),
        cnn("inception_s16", 8, [inception(4, 4, 8, 2, 4, 4)], 16),
        cnn("fire_x2_s16", 16, [fire(4, 8), fire(6, 12)], 16),
        cnn("inception_x2_s16", 12, [inception(8, 6, 8, 2, 4, 4),
                                     inception(8, 8, 12, 4, 6, 6)], 16),
        cnn("fire_s24", 8, [fire(8, 16)], 24),
        cnn("inception_fire_s16", 8, [inception(6, 4, 8, 2, 4, 2), fire(6, 12)], 16),
        cnn("fire_x3_s12", 16, [fire(4, 8), fire(4, 8), fire(8, 16)], 12),
    ]


def split(all_specs: list[GraphSpec]) -> tuple[list[GraphSpec], list[GraphSpec]]:
    """(training, held out): every third graph of each family, from its second, held out."""
    train, held = [], []
    seen: dict[str, int] = {}
    for spec in all_specs:
        k = seen.get(spec.family, 0)
        seen[spec.family] = k + 1
        (held if k % 3 == 1 else train).append(spec)
    return train, held


def relax_graph_of(spec: GraphSpec, out_dir: Path, seed: int = 0):
    """`spec`'s module with random weights (seed `seed`), exported to ONNX under `out_dir` and
    imported as harl imports a model."""
    from harl.graph.load import relax_of_onnx

    torch.manual_seed(seed)
    path = Path(out_dir) / f"{spec.name}.onnx"
    if not path.exists():
        export_torch(spec.build(), (torch.randn(spec.shape),), path, input_names=["x"])
    return relax_of_onnx(path)
