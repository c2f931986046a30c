"""Small torch models, exported to ONNX, with the operators real exports use and the examples lack.

    python tools/make_zoo.py --out logs/zoo
    for m in logs/zoo/*.onnx; do
        python -m harl.tune $m --trials 16 --work-dir logs/zoo/runs/$(basename $m .onnx)
    done  # encoder.onnx has a symbolic batch: tuned as 1 (--input-shape x:1,16,64 says so)

A robustness sweep, not a benchmark: depthwise convs with ReLU6 and batch norms, a transformer
encoder layer (symbolic batch, which harl tunes as 1), a GRU and a two-layer
bidirectional LSTM tagger (recurrent layers TVM's importer lacks: harl unrolls them), a
transpose conv with bilinear resize, an embedding bag, a 1-D conv net, masked attention whose
`chunk` the exporter writes as shape arithmetic, attention clamped by Max and Min, einsum /
top-k / argmax / cumsum with two inputs and outputs, pixel shuffle with instance norm, group
norm with swish, and onnxruntime's dynamic int8 quantisation of two of them (its ConvInteger,
which TVM's importer lacks, harl rewrites as an int32 Conv). Exported with torch's TorchScript
exporter (`dynamo=False`), opset 17, fixed seeds; two at the exporter's default opset (20 in
torch 2.13), which writes GELU as one Gelu node: a BERT-sized encoder layer, and a conv net
with Mish (YOLOv4's activation, exported as Softplus, Tanh and Mul).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from benchlib.export import OPSET, export_torch
from torch import nn


class MobileBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(16, 64, 1, bias=False), nn.BatchNorm2d(64),
                                    nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=64, bias=False),
                                nn.BatchNorm2d(64), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(64, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.dw(self.expand(x)))
        return self.head(x.mean((2, 3)))


class Encoder(nn.Module):
    def __init__(self, width: int = 64, heads: int = 4, hidden: int = 128):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(width, heads, hidden, dropout=0.0,
                                                activation="gelu", batch_first=True)

    def forward(self, x):
        return self.layer(x)


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.out(y[:, -1])


class LstmTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(500, 24)
        self.lstm = nn.LSTM(24, 32, num_layers=2, bidirectional=True, batch_first=True)
        self.tag = nn.Linear(64, 5)

    def forward(self, ids):
        y, _ = self.lstm(self.embed(ids))
        return self.tag(y)


class UNetLite(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, 2)
        self.resize = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.out = nn.Conv2d(16, 4, 1)

    def forward(self, x):
        d = self.down(x)
        return torch.sigmoid(self.out(torch.cat([self.up(d), self.resize(d)[:, :8]], 1)))


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 32)
        self.fc = nn.Linear(32, 3)

    def forward(self, ids):
        return torch.softmax(self.fc(self.embed(ids).mean(1)), -1)


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(4, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ReLU(),
                                  nn.MaxPool1d(2), nn.Conv1d(16, 16, 3, padding=1),
                                  nn.LeakyReLU(0.1))
        self.fc = nn.Linear(16 * 32, 2)

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


class MaskedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-1, -2) / 32 ** 0.5
        n = x.shape[1]
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1),
                                    float("-inf"))
        return self.norm(x + torch.softmax(scores, -1) @ v)


class ClampedAttention(nn.Module):
    """OPT's attention (and LLaMA's before 2023) clamps its scores from below with torch.max,
    and a clamp by tensors is a Max and a Min: ONNX Max / Min nodes."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.low = nn.Parameter(torch.full((32,), -0.5))
        self.high = nn.Parameter(torch.full((32,), 0.5))

    def forward(self, x, mask):
        q, k, v = self.qkv(x).split(32, -1)
        scores = q @ k.transpose(-1, -2) / 32 ** 0.5 + mask
        scores = torch.max(scores, torch.tensor(torch.finfo(scores.dtype).min))
        return torch.clamp(torch.softmax(scores, -1) @ v, self.low, self.high)


class MultiIO(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, a, b):
        e = torch.einsum("bij,jk->bik", a, self.w) + b
        return torch.topk(e, 3, dim=-1).values.cumsum(-1), e.argmax(-1)


class PixelShuffleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 16, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        self.norm = nn.InstanceNorm2d(4)

    def forward(self, x):
        y = self.norm(self.shuffle(self.conv(x)))
        return nn.functional.interpolate(y, scale_factor=0.5, mode="nearest").clamp(-1, 1)


class GroupNormSwish(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.norm = nn.GroupNorm(4, 16)

    def forward(self, x):
        y = self.norm(self.conv(x))
        return y * torch.sigmoid(y)


class MishConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        layers, width = [], 3
        for out, stride in ((32, 1), (64, 2), (64, 1)):
            layers += [nn.Conv2d(width, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out),
                       nn.Mish()]
            width = out
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return self.body(x)


DEFAULT_OPSET = ("gelu_encoder", "mish_convnet")
"""models exported at the exporter's default opset, not 17"""


def models() -> dict:
    """name -> (module, example inputs, input names, dynamic axes or None)."""
    return {
        "mobile_block": (MobileBlock(), (torch.randn(1, 3, 64, 64),), ["x"], None),
        "encoder": (Encoder(), (torch.randn(1, 16, 64),), ["x"], {"x": {0: "batch"}}),
        "gru": (Recurrent(), (torch.randn(1, 8, 16),), ["x"], None),
        "lstm_tagger": (LstmTagger(), (torch.randint(0, 500, (1, 20)),), ["ids"], None),
        "unet_lite": (UNetLite(), (torch.randn(1, 8, 32, 32),), ["x"], None),
        "text_classifier": (TextClassifier(), (torch.randint(0, 1000, (2, 12)),), ["ids"],
                            None),
        "conv1d": (Conv1dNet(), (torch.randn(1, 4, 64),), ["x"], None),
        "masked_attention": (MaskedAttention(), (torch.randn(1, 10, 32),), ["x"], None),
        "clamped_attention": (ClampedAttention(), (torch.randn(1, 10, 32),
                                                   torch.zeros(1, 10, 10)), ["x", "mask"], None),
        "multi_io": (MultiIO(), (torch.randn(2, 5, 8), torch.randn(2, 5, 8)), ["a", "b"], None),
        "pixel_shuffle": (PixelShuffleNet(), (torch.randn(1, 4, 16, 16),), ["x"], None),
        "groupnorm_swish": (GroupNormSwish(), (torch.randn(1, 8, 16, 16),), ["x"], None),
        "gelu_encoder": (Encoder(256, 4, 1024), (torch.randn(1, 128, 256),), ["x"], None),
        "mish_convnet": (MishConvNet(), (torch.randn(1, 3, 96, 96),), ["x"], None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("logs/zoo"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for name, (module, inputs, names, dynamic) in models().items():
        export_torch(module, inputs, args.out / f"{name}.onnx", input_names=names,
                     opset=None if name in DEFAULT_OPSET else OPSET, dynamic_axes=dynamic)
        print(f"wrote {args.out / name}.onnx")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for name, weights in (("mobile_block", QuantType.QUInt8),
                          ("text_classifier", QuantType.QInt8)):
        quantize_dynamic(str(args.out / f"{name}.onnx"), str(args.out / f"{name}_int8.onnx"),
                         weight_type=weights)
        print(f"wrote {args.out / name}_int8.onnx")


if __name__ == "__main__":
    main()
