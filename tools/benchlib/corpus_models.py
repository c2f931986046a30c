"""The torch modules of the benchmark corpus (tools/make_corpus.py), each written here after the
paper or library named in its docstring, to be exported with random weights.

The CNNs follow torchvision's architectures (torchvision itself is not needed): the same stages,
widths, strides and activations, with batch norms left unfused as an exporter writes them.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

# --- transformers ---------------------------------------------------------------------------


class SelfAttention(nn.Module):
    """Multi-head attention with separate Q, K, V and output projections (BERT's layout); an
    additive `mask` (0 or -inf) may hide positions, e.g. the future in a decoder."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x, mask=None):
        b, n, w = x.shape
        d = w // self.heads

        def split(t):
            return t.reshape(b, n, self.heads, d).transpose(1, 2)

        scores = split(self.query(x)) @ split(self.key(x)).transpose(-1, -2) / math.sqrt(d)
        if mask is not None:
            scores = scores + mask
        y = torch.softmax(scores, -1) @ split(self.value(x))
        return self.out(y.transpose(1, 2).reshape(b, n, w))


class BertLayer(nn.Module):
    """BERT's post-norm encoder layer (Devlin et al. 2019; Hugging Face's BertLayer): attention,
    residual, LayerNorm; GELU MLP four times as wide, residual, LayerNorm."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attention = SelfAttention(width, heads)
        self.norm1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))
        self.norm2 = nn.LayerNorm(width)

    def forward(self, x):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.mlp(x))


class Bert(nn.Module):
    """A BERT encoder: token, position and segment embeddings with LayerNorm (when `vocab` is
    given; else the input is already embedded), `layers` BertLayers, and the pooler (tanh of a
    dense layer on the first token)."""

    def __init__(self, *, layers: int, width: int, heads: int, seq: int, vocab: int | None):
        super().__init__()
        self.vocab = vocab
        if vocab is not None:
            self.tokens = nn.Embedding(vocab, width)
            self.positions = nn.Parameter(torch.randn(1, seq, width) * 0.02)
            self.segment = nn.Parameter(torch.randn(width) * 0.02)
            self.embed_norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList(BertLayer(width, heads) for _ in range(layers))
        self.pooler = nn.Linear(width, width)

    def forward(self, x):
        if self.vocab is not None:
            x = self.embed_norm(self.tokens(x) + self.positions + self.segment)
        for layer in self.layers:
            x = layer(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


class TorchEncoder(nn.Module):
    """PyTorch's own nn.TransformerEncoder (post-norm or, `norm_first`, pre-norm)."""

    def __init__(self, *, layers: int, width: int, heads: int, hidden: int, activation: str,
                 norm_first: bool):
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, heads, hidden, dropout=0.0, activation=activation,
                                           batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


class GptBlock(nn.Module):
    """GPT-2's pre-norm decoder block (Radford et al. 2019): causal self-attention and a GELU MLP,
    each after a LayerNorm and added back."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = SelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * width, width))

    def forward(self, x, mask):
        x = x + self.attention(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class Gpt(nn.Module):
    """A GPT-2-style language model: token and position embeddings, causal blocks, a final
    LayerNorm and the vocabulary head tied to the token embedding."""

    def __init__(self, *, layers: int, width: int, heads: int, seq: int, vocab: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.randn(1, seq, width) * 0.02)
        self.blocks = nn.ModuleList(GptBlock(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, ids):
        x = self.tokens(ids) + self.positions
        for block in self.blocks:
            x = block(x, self.mask)
        return self.norm(x) @ self.tokens.weight.t()


class TorchDecoder(nn.Module):
    """PyTorch's nn.TransformerDecoder: causal self-attention, cross-attention to an encoder's
    output (`memory`) and a ReLU MLP per layer, as in the original Transformer (Vaswani et al.
    2017)."""

    def __init__(self, *, layers: int, width: int, heads: int, hidden: int, seq: int):
        super().__init__()
        layer = nn.TransformerDecoderLayer(width, heads, hidden, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, x, memory):
        return self.decoder(x, memory, tgt_mask=self.mask)


class PreNormLayer(nn.Module):
    """ViT's encoder layer (Dosovitskiy et al. 2021; timm's Block): pre-norm attention and GELU
    MLP, each added back."""

    def __init__(self, width: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.attention = SelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(),
                                 nn.Linear(mlp_ratio * width, width))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """ViT: a strided conv cuts the image into patches, a class token and position embeddings
    are added, pre-norm encoder layers follow, and a linear head reads the class token."""

    def __init__(self, *, image: int, patch: int, width: int, heads: int, layers: int,
                 classes: int = 1000):
        super().__init__()
        self.patches = nn.Conv2d(3, width, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.layers = nn.Sequential(*(PreNormLayer(width, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.head = nn.Linear(width, classes)

    def forward(self, image):
        x = self.patches(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls, x], 1) + self.positions
        return self.head(self.norm(self.layers(x))[:, 0])


# --- CNNs -----------------------------------------------------------------------------------


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Conv (no bias, 'same' padding), batch norm and an activation (None: none)."""
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """ResNet's two 3x3 convs with a shortcut (He et al. 2016; torchvision's BasicBlock)."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, width, 3, stride),
                                  conv_bn(width, width, 3, act=None))
        self.shortcut = (conv_bn(cin, width, 1, stride, act=None)
                         if stride != 1 or cin != width else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    """ResNet's 1x1-3x3-1x1 bottleneck, stride on the 3x3 (torchvision's ResNet v1.5)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, stride),
                                  conv_bn(width, cout, 1, act=None))
        self.shortcut = (conv_bn(cin, cout, 1, stride, act=None)
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """torchvision's ResNet: 7x7 stem and max pool, four stages (`width` wide, doubling, stride 2
    from the second on; torchvision's `width` is 64), global average pool, linear head."""

    def __init__(self, block: type[BasicBlock | Bottleneck], depths: tuple[int, ...],
                 classes: int = 1000, width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, width, 7, 2), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], width
        widths = (width, 2 * width, 4 * width, 8 * width)
        for i, (width, depth) in enumerate(zip(widths, depths, strict=True)):
            for j in range(depth):
                stages.append(block(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * block.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)).mean((2, 3)))


def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round channels to a multiple of 8, never below 90%."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class InvertedResidual(nn.Module):
    """MobileNet-V2's block (Sandler et al. 2018): 1x1 expansion, 3x3 depthwise, linear 1x1
    projection, ReLU6; a shortcut where the shape allows."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1, act=nn.ReLU6)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNet-V2 with its width multiplier."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))  # expand, channels, repeats, stride

    def __init__(self, width_mult: float = 1.0, classes: int = 1000):
        super().__init__()
        cin = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        layers = [conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
        for expand, channels, repeats, stride in self.SETTINGS:
            cout = make_divisible(channels * width_mult)
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(conv_bn(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(last, classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class SqueezeExcitation(nn.Module):
    """Squeeze-and-excitation (Hu et al. 2018) as EfficientNet uses it: global pool, 1x1 conv
    down with swish, 1x1 conv up, sigmoid gate."""

    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.down = nn.Conv2d(channels, squeezed, 1)
        self.up = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.up(F.silu(self.down(x.mean((2, 3), keepdim=True)))))


class MBConv(nn.Module):
    """EfficientNet's block (Tan and Le 2019; torchvision's MBConv): 1x1 expansion, depthwise
    k x k, squeeze-excitation on a quarter of the input width, linear projection, swish."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1, act=nn.SiLU)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=nn.SiLU),
                   SqueezeExcitation(hidden, max(1, cin // 4)), conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class EfficientNet(nn.Module):
    """torchvision's EfficientNet-B0 stages, scaled by a width multiplier and a depth multiplier
    (B0 is 1.0 and 1.0)."""

    STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
              (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
              (6, 3, 1, 192, 320, 1))  # expand, kernel, stride, in, out, layers

    def __init__(self, width_mult: float = 1.0, depth_mult: float = 1.0, classes: int = 1000):
        super().__init__()
        stem = make_divisible(32 * width_mult)
        layers, cin = [conv_bn(3, stem, 3, 2, act=nn.SiLU)], stem
        for expand, kernel, stride, _, out, repeats in self.STAGES:
            cout = make_divisible(out * width_mult)
            for i in range(int(math.ceil(repeats * depth_mult))):
                layers.append(MBConv(cin, cout, kernel, stride if i == 0 else 1, expand))
                cin = cout
        last = 4 * cin
        layers.append(conv_bn(cin, last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(last, classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class Inception(nn.Module):
    """GoogLeNet's inception module (Szegedy et al. 2015; torchvision's Inception): 1x1, 1x1 then
    3x3, 1x1 then 3x3 (torchvision's stand-in for the paper's 5x5), and 3x3 max pool then 1x1,
    concatenated."""

    def __init__(self, cin, c1, c3r, c3, c5r, c5, pool):
        super().__init__()
        self.b1 = conv_bn(cin, c1, 1)
        self.b2 = nn.Sequential(conv_bn(cin, c3r, 1), conv_bn(c3r, c3, 3))
        self.b3 = nn.Sequential(conv_bn(cin, c5r, 1), conv_bn(c5r, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, pool, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class GoogLeNet(nn.Module):
    """torchvision's GoogLeNet (batch-normed, without the auxiliary heads); every width divided
    by `narrow` (1: torchvision's)."""

    def __init__(self, classes: int = 1000, narrow: int = 1):
        super().__init__()

        def inception(*widths):
            return Inception(*(w // narrow for w in widths))

        def pool(kernel=3):
            return nn.MaxPool2d(kernel, 2, ceil_mode=True)

        self.body = nn.Sequential(
            conv_bn(3, 64 // narrow, 7, 2), pool(), conv_bn(64 // narrow, 64 // narrow, 1),
            conv_bn(64 // narrow, 192 // narrow, 3), pool(),
            inception(192, 64, 96, 128, 16, 32, 32), inception(256, 128, 128, 192, 32, 96, 64),
            pool(),
            inception(480, 192, 96, 208, 16, 48, 64), inception(512, 160, 112, 224, 24, 64, 64),
            inception(512, 128, 128, 256, 24, 64, 64), inception(512, 112, 144, 288, 32, 64, 64),
            inception(528, 256, 160, 320, 32, 128, 128),
            pool(2),
            inception(832, 256, 160, 320, 32, 128, 128),
            inception(832, 384, 192, 384, 48, 128, 128))
        self.head = nn.Linear(1024 // narrow, classes)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class Fire(nn.Module):
    """SqueezeNet's fire module (Iandola et al. 2016): a 1x1 squeeze, then 1x1 and 3x3 expands
    side by side, concatenated, all ReLU."""

    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1 = nn.Conv2d(squeeze, expand, 1)
        self.expand3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1(s)), F.relu(self.expand3(s))], 1)


class SqueezeNet11(nn.Module):
    """torchvision's SqueezeNet 1.1: eight fire modules between ceil-mode max pools, a 1x1 conv
    classifier and global average pooling."""

    def __init__(self, classes: int = 1000):
        super().__init__()

        def pool():
            return nn.MaxPool2d(3, 2, ceil_mode=True)

        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool(), Fire(64, 16, 64), Fire(128, 16, 64), pool(),
            Fire(128, 32, 128), Fire(256, 32, 128), pool(), Fire(256, 48, 192), Fire(384, 48, 192),
            Fire(384, 64, 256), Fire(512, 64, 256))
        self.classifier = nn.Conv2d(512, classes, 1)

    def forward(self, x):
        return F.relu(self.classifier(self.features(x))).mean((2, 3))


# --- MLPs and recurrent models --------------------------------------------------------------


class Mlp(nn.Module):
    """A plain multilayer perceptron: Linear and ReLU layers of the given widths."""

    def __init__(self, widths: tuple[int, ...]):
        super().__init__()
        layers = []
        for cin, cout in zip(widths, widths[1:], strict=False):
            layers += [nn.Linear(cin, cout), nn.ReLU()]
        self.body = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.body(x)


class GatedMlp(nn.Module):
    """LLaMA's SwiGLU feed-forward (Shazeer 2020; Touvron et al. 2023) with its RMSNorm and the
    residual, stacked `layers` deep."""

    def __init__(self, *, width: int, hidden: int, layers: int):
        super().__init__()
        self.norms = nn.ParameterList(nn.Parameter(torch.ones(width)) for _ in range(layers))
        self.gates = nn.ModuleList(nn.Linear(width, hidden, bias=False) for _ in range(layers))
        self.ups = nn.ModuleList(nn.Linear(width, hidden, bias=False) for _ in range(layers))
        self.downs = nn.ModuleList(nn.Linear(hidden, width, bias=False) for _ in range(layers))

    def forward(self, x):
        for norm, gate, up, down in zip(self.norms, self.gates, self.ups, self.downs, strict=True):
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm
            x = x + down(F.silu(gate(h)) * up(h))
        return x


class MixerLayer(nn.Module):
    """MLP-Mixer's layer (Tolstikhin et al. 2021): a GELU MLP across tokens, then one across
    channels, each pre-norm and added back."""

    def __init__(self, tokens: int, width: int, token_hidden: int, channel_hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(),
                                       nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(width)
        self.channel_mlp = nn.Sequential(nn.Linear(width, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, width))

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class MlpMixer(nn.Module):
    """MLP-Mixer: patch embedding by a strided conv, mixer layers, mean over tokens, a head."""

    def __init__(self, *, image: int, patch: int, width: int, layers: int, classes: int = 1000):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patches = nn.Conv2d(3, width, patch, patch)
        self.layers = nn.Sequential(*(MixerLayer(tokens, width, width // 2, 4 * width)
                                      for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, image):
        x = self.layers(self.patches(image).flatten(2).transpose(1, 2))
        return self.head(self.norm(x).mean(1))


class GruClassifier(nn.Module):
    """A stacked GRU over a sequence of feature vectors, classified from the last step (a
    keyword-spotting-style model)."""

    def __init__(self, *, features: int, hidden: int, layers: int, classes: int):
        super().__init__()
        self.gru = nn.GRU(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.head(y[:, -1])


class LstmLanguageModel(nn.Module):
    """The LSTM language model of Zaremba et al. 2014 (PyTorch's word_language_model example):
    embedding, stacked LSTM, a vocabulary decoder at every step."""

    def __init__(self, *, vocab: int, width: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, layers, batch_first=True)
        self.decoder = nn.Linear(width, vocab)

    def forward(self, ids):
        y, _ = self.lstm(self.embed(ids))
        return self.decoder(y)
