"""The benchmark corpus: ONNX models harl's settings were not chosen on, split once into a
development set and a held-out set.

    python tools/make_corpus.py --list                       # the manifest as a table
    python tools/make_corpus.py --out logs/corpus            # export and check every model
    python tools/make_corpus.py --split held-out --tasks     # also count harl's tuning tasks
    python tools/make_corpus.py --compare                    # and check TVM's outputs
    python tools/make_corpus.py --only resnet18 bert_tiny
    python tools/make_corpus.py --write-manifest             # rewrite tasks/corpus.json

Models are written here in torch after public architectures (BERT, GPT-2, PyTorch's own
transformer layers, ViT, torchvision's ResNet, MobileNet-V2, EfficientNet, GoogLeNet and
SqueezeNet, MLPs, MLP-Mixer, a GRU and an LSTM) with random weights (torch's default
initialisation, seed 0 for each model), and exported with torch's TorchScript exporter, opset 17
(see tools/benchlib/export.py); others are the onnx package's light models
(onnx/backend/test/data/light), whose weights are constant fills: good for speed, useless for a
correctness check (DenseNet-121, also there, is left out: its 253 tasks would leave most untuned
at the budgets the corpus is for). Batch 1 throughout, except the plain MLP (64 rows).

The split is a rule on names and families only, fixed before any result: within each family,
models sorted by name alternate development, held-out, development, ... So a family of two or
more has members on both sides, and adding a model moves only those after it in its family.
Each model is checked on export: onnx.checker, then onnxruntime on random inputs (finite outputs;
not constant where the weights are random); `--compare` also builds each random-weight model
untuned with TVM through harl's import and checks its outputs against onnxruntime's. `--small`
builds the same models narrower, shallower and at lower resolutions, for a quick test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # harl, when run from elsewhere

import numpy as np  # noqa: E402
import torch  # noqa: E402
from benchlib import corpus_models as cm  # noqa: E402
from benchlib.export import OPSET, export_torch  # noqa: E402
from benchlib.models import light_models_dir  # noqa: E402
from torch import nn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tasks" / "corpus.json"
DEV, HELD_OUT = "dev", "held-out"
SEED = 0
RANDOM_WEIGHTS = f"random (torch's default initialisation, seed {SEED}; batch norm statistics " \
                 "uniform)"
CONSTANT_WEIGHTS = "constant fills (the onnx package's light model): for speed only, useless " \
                   "for a correctness check"


@dataclass(frozen=True)
class Input:
    """One graph input: float32 drawn from N(0, 1), or int64 token ids below `vocab`."""

    name: str
    shape: tuple[int, ...]
    vocab: int | None = None

    @property
    def dtype(self) -> str:
        return "float32" if self.vocab is None else "int64"

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        if self.vocab is None:
            return rng.standard_normal(self.shape, dtype=np.float32)
        return rng.integers(0, self.vocab, self.shape, dtype=np.int64)


@dataclass(frozen=True)
class Spec:
    """One corpus model: torch-built (`build(small)` gives the module) or an onnx light model."""

    name: str
    family: str
    source: str
    inputs: tuple[Input, ...]
    build: Callable[[bool], nn.Module] | None = None
    small_inputs: tuple[Input, ...] | None = None
    light: str | None = None

    @property
    def weights(self) -> str:
        return CONSTANT_WEIGHTS if self.light else RANDOM_WEIGHTS

    def inputs_for(self, small: bool) -> tuple[Input, ...]:
        return self.small_inputs if small and self.small_inputs is not None else self.inputs


def image(size: int, name: str = "image") -> tuple[Input, ...]:
    return (Input(name, (1, 3, size, size)),)


def tokens(seq: int, vocab: int) -> tuple[Input, ...]:
    return (Input("ids", (1, seq), vocab),)


def hidden(seq: int, width: int) -> tuple[Input, ...]:
    return (Input("x", (1, seq, width)),)


def cnn(name: str, family: str, source: str, build: Callable[[bool], nn.Module], size: int,
        small_size: int = 32) -> Spec:
    """A CNN; `build(small)` narrows it for the small build, which also lowers its
    resolution."""
    return Spec(name, family, source, image(size), build, image(small_size))


def resnet(block, depths):
    return lambda small: cm.ResNet(block, depths, **(dict(width=8, classes=10) if small else {}))


def light(name: str, family: str, architecture: str, input_name: str = "data_0") -> Spec:
    return Spec(f"light_{name}", family,
                f"{architecture}; onnx package: onnx/backend/test/data/light/light_{name}.onnx",
                image(224, input_name), light=name)


def bert(*, layers, width, heads, seq, vocab):
    def build(small):
        if small:
            return cm.Bert(layers=1, width=32, heads=2, seq=8, vocab=vocab and 100)
        return cm.Bert(layers=layers, width=width, heads=heads, seq=seq, vocab=vocab)
    return build


def bert_inputs(seq, width, vocab, small=False):
    if small:
        seq, width, vocab = 8, 32, vocab and 100
    return tokens(seq, vocab) if vocab else hidden(seq, width)


def bert_spec(name, source, *, layers, width, heads, seq, vocab):
    return Spec(name, "transformer-encoder", source, bert_inputs(seq, width, vocab),
                bert(layers=layers, width=width, heads=heads, seq=seq, vocab=vocab),
                bert_inputs(seq, width, vocab, small=True))


def torch_encoder(name, *, layers, width, heads, hidden_, seq, activation, norm_first):
    kind = "pre-norm" if norm_first else "post-norm"
    return Spec(
        name, "transformer-encoder",
        f"torch.nn.TransformerEncoder, {layers} {kind} layer(s), {activation}",
        hidden(seq, width),
        lambda small: cm.TorchEncoder(layers=1 if small else layers, width=32 if small else width,
                                      heads=2 if small else heads, hidden=64 if small else hidden_,
                                      activation=activation, norm_first=norm_first),
        hidden(8, 32))


def gpt(name, *, layers, width, heads, seq, vocab):
    return Spec(
        name, "transformer-decoder",
        f"written here after GPT-2 (Radford et al. 2019): {layers} causal pre-norm blocks, "
        "tied vocabulary head", tokens(seq, vocab),
        lambda small: (cm.Gpt(layers=1, width=32, heads=2, seq=8, vocab=100) if small else
                       cm.Gpt(layers=layers, width=width, heads=heads, seq=seq, vocab=vocab)),
        tokens(8, 100))


def vit(name, *, image_size, patch, width, heads, layers, classes=1000):
    return Spec(
        name, "vision-transformer",
        f"written here after ViT (Dosovitskiy et al. 2021; timm's VisionTransformer): "
        f"{patch}x{patch} patches, {layers} pre-norm layers",
        image(image_size),
        lambda small: (cm.VisionTransformer(image=32, patch=8, width=32, heads=2, layers=1,
                                            classes=10) if small else
                       cm.VisionTransformer(image=image_size, patch=patch, width=width,
                                            heads=heads, layers=layers, classes=classes)),
        image(32))


TORCHVISION = "written here after torchvision's"


def specs() -> list[Spec]:
    """Every corpus model, in the order of the manifest."""
    return [
        # transformer encoders
        bert_spec("bert_tiny", "written here after BERT (Devlin et al. 2019; Hugging Face's "
                  "BertModel): embeddings, 2 post-norm layers, pooler",
                  layers=2, width=128, heads=2, seq=128, vocab=30522),
        bert_spec("bert_mini", "written here after BERT (Devlin et al. 2019; Hugging Face's "
                  "BertModel): embeddings, 4 post-norm layers, pooler",
                  layers=4, width=256, heads=4, seq=128, vocab=30522),
        bert_spec("bert_small_seq64", "written here after BERT (Devlin et al. 2019; Hugging "
                  "Face's BertModel): embeddings, 4 post-norm layers, pooler",
                  layers=4, width=512, heads=8, seq=64, vocab=30522),
        bert_spec("bert_base_layer", "written here after BERT-base (Devlin et al. 2019): one "
                  "post-norm layer on embedded input, pooler",
                  layers=1, width=768, heads=12, seq=128, vocab=None),
        torch_encoder("torch_encoder", layers=2, width=256, heads=4, hidden_=1024, seq=64,
                      activation="relu", norm_first=False),
        torch_encoder("torch_encoder_prenorm", layers=1, width=512, heads=8, hidden_=2048,
                      seq=128, activation="gelu", norm_first=True),
        # transformer decoders
        gpt("gpt_tiny", layers=2, width=256, heads=4, seq=64, vocab=8192),
        gpt("gpt_mini", layers=4, width=384, heads=6, seq=128, vocab=8192),
        Spec("torch_decoder", "transformer-decoder",
             "torch.nn.TransformerDecoder, 2 post-norm layers: causal self-attention, "
             "cross-attention to a 96-step memory, ReLU MLP",
             (Input("x", (1, 64, 256)), Input("memory", (1, 96, 256))),
             lambda small: (cm.TorchDecoder(layers=1, width=32, heads=2, hidden=64, seq=8)
                            if small else
                            cm.TorchDecoder(layers=2, width=256, heads=4, hidden=1024, seq=64)),
             (Input("x", (1, 8, 32)), Input("memory", (1, 12, 32)))),
        # vision transformers
        vit("vit_tiny", image_size=224, patch=16, width=192, heads=3, layers=4),
        vit("vit_small_2layers", image_size=224, patch=16, width=384, heads=6, layers=2),
        vit("vit_cifar", image_size=32, patch=4, width=256, heads=4, layers=6, classes=10),
        # ResNets
        cnn("resnet18", "resnet", f"{TORCHVISION} resnet18 (He et al. 2016): basic blocks",
            resnet(cm.BasicBlock, (2, 2, 2, 2)), 224),
        cnn("resnet18_112", "resnet", f"{TORCHVISION} resnet18 at 112x112",
            resnet(cm.BasicBlock, (2, 2, 2, 2)), 112),
        cnn("resnet34", "resnet", f"{TORCHVISION} resnet34: basic blocks",
            resnet(cm.BasicBlock, (3, 4, 6, 3)), 224),
        cnn("resnet50_128", "resnet", f"{TORCHVISION} resnet50 (v1.5 bottlenecks) at 128x128",
            resnet(cm.Bottleneck, (3, 4, 6, 3)), 128),
        light("resnet50", "resnet", "ResNet-50 (Caffe2 model zoo)", "gpu_0/data_0"),
        # mobile CNNs
        cnn("mobilenet_v2", "mobile-cnn", f"{TORCHVISION} mobilenet_v2 (Sandler et al. 2018)",
            lambda small: cm.MobileNetV2(0.25 if small else 1.0, 10 if small else 1000), 224),
        cnn("mobilenet_v2_050_160", "mobile-cnn",
            f"{TORCHVISION} mobilenet_v2, width multiplier 0.5, at 160x160",
            lambda small: cm.MobileNetV2(0.25 if small else 0.5, 10 if small else 1000), 160),
        light("shufflenet", "mobile-cnn", "ShuffleNet (Caffe2 model zoo)", "gpu_0/data_0"),
        # EfficientNets
        cnn("efficientnet_b0", "efficientnet",
            f"{TORCHVISION} efficientnet_b0 (Tan and Le 2019): MBConv, squeeze-excitation, swish",
            lambda small: cm.EfficientNet(0.25 if small else 1.0, classes=10 if small else 1000),
            224),
        cnn("efficientnet_mini", "efficientnet",
            f"{TORCHVISION} efficientnet_b0 stages, width 0.5 and depth 0.5, at 128x128",
            lambda small: cm.EfficientNet(0.25 if small else 0.5, 0.5,
                                          classes=10 if small else 1000), 128),
        # Inception
        cnn("googlenet", "inception", f"{TORCHVISION} googlenet (Szegedy et al. 2015), batch "
            "norms, no auxiliary heads",
            lambda small: cm.GoogLeNet(10, 8) if small else cm.GoogLeNet(), 224),
        light("inception_v1", "inception", "GoogLeNet / Inception-v1 (Caffe model zoo)"),
        light("inception_v2", "inception", "Inception-v2 with batch norm (Caffe2 model zoo)"),
        # SqueezeNet
        cnn("squeezenet1_1", "squeezenet",
            f"{TORCHVISION} squeezenet1_1 (Iandola et al. 2016): fire modules",
            lambda small: cm.SqueezeNet11(10 if small else 1000), 224),
        light("squeezenet", "squeezenet", "SqueezeNet 1.0 (Caffe model zoo)"),
        # plain conv stacks
        light("bvlc_alexnet", "plain-cnn", "AlexNet (BVLC Caffe model zoo)"),
        light("vgg19", "plain-cnn", "VGG-19 (Caffe model zoo)"),
        light("zfnet512", "plain-cnn", "ZFNet-512 (Caffe2 model zoo)", "gpu_0/data_0"),
        # MLPs
        Spec("mlp_plain", "mlp", "a plain MLP 784-2048-2048-1024-10 with ReLU, on 64 rows",
             (Input("x", (64, 784)),),
             lambda small: cm.Mlp((16, 32, 10) if small else (784, 2048, 2048, 1024, 10)),
             (Input("x", (4, 16)),)),
        Spec("mlp_gated", "mlp", "written here after LLaMA's SwiGLU feed-forward (Shazeer 2020) "
             "with RMSNorm: 2 residual layers, width 512, hidden 1408", hidden(128, 512),
             lambda small: cm.GatedMlp(width=32 if small else 512, hidden=48 if small else 1408,
                                       layers=1 if small else 2),
             hidden(8, 32)),
        Spec("mlp_mixer", "mlp", "written here after MLP-Mixer (Tolstikhin et al. 2021): 16x16 "
             "patches, 4 layers, width 256", image(224),
             lambda small: (cm.MlpMixer(image=32, patch=8, width=32, layers=1, classes=10)
                            if small else cm.MlpMixer(image=224, patch=16, width=256, layers=4)),
             image(32)),
        # recurrent
        Spec("gru_classifier", "recurrent", "a 2-layer GRU (hidden 128) over 49 frames of 40 "
             "features, classified from the last step (keyword-spotting shape)",
             (Input("x", (1, 49, 40)),),
             lambda small: cm.GruClassifier(features=8 if small else 40,
                                            hidden=16 if small else 128,
                                            layers=1 if small else 2, classes=12),
             (Input("x", (1, 6, 8)),)),
        Spec("lstm_lm", "recurrent", "written here after PyTorch's word_language_model example "
             "(Zaremba et al. 2014): embedding, 2-layer LSTM (256), decoder, 35 steps",
             tokens(35, 10000),
             lambda small: (cm.LstmLanguageModel(vocab=100, width=16, layers=1) if small else
                            cm.LstmLanguageModel(vocab=10000, width=256, layers=2)),
             tokens(6, 100)),
    ]


def splits(models: list[Spec]) -> dict[str, str]:
    """The split rule, on names and families only: within a family, sorted by name, models
    alternate development, held-out, development, ..."""
    out: dict[str, str] = {}
    families: dict[str, list[str]] = {}
    for spec in models:
        families.setdefault(spec.family, []).append(spec.name)
    for names in families.values():
        for i, name in enumerate(sorted(names)):
            out[name] = HELD_OUT if i % 2 else DEV
    return out


def manifest(models: list[Spec] | None = None) -> list[dict]:
    """tasks/corpus.json's content: one record per model."""
    models = specs() if models is None else models
    split = splits(models)
    return [{"name": s.name, "family": s.family, "split": split[s.name], "source": s.source,
             "weights": s.weights,
             "inputs": {i.name: {"shape": list(i.shape), "dtype": i.dtype} for i in s.inputs}}
            for s in models]


SPLIT_RULE = ("within each family, models sorted by name alternate dev, held-out, dev, ...; "
              "held-out models are for reporting only: no setting is chosen by looking at them")


def manifest_text() -> str:
    """tasks/corpus.json as written: the rule, the opset, then one model per line."""
    models = ",\n".join(f"  {json.dumps(record)}" for record in manifest())
    return (f'{{\n "split_rule": {json.dumps(SPLIT_RULE)},\n "opset": {OPSET},\n'
            f' "models": [\n{models}\n ]\n}}\n')


# --- building and checking ------------------------------------------------------------------


def export(spec: Spec, out: Path, small: bool) -> Path:
    """Write `spec`'s ONNX file into `out`; seeded, so a model's bytes do not depend on which
    others are built."""
    path = out / f"{spec.name}.onnx"
    if spec.light is not None:
        shutil.copyfile(light_models_dir() / f"light_{spec.light}.onnx", path)
        return path
    torch.manual_seed(SEED)
    module = spec.build(small)
    rng = np.random.default_rng(SEED)
    inputs = spec.inputs_for(small)
    example = tuple(torch.from_numpy(i.draw(rng)) for i in inputs)
    # not under torch.no_grad(): there nn.TransformerEncoderLayer takes its fused fast path,
    # which the exporter lacks
    export_torch(module, example, path, input_names=[i.name for i in inputs])
    return path


def check(spec: Spec, path: Path, small: bool, *, repeats: int = 10,
          min_seconds: float = 2.0) -> float:
    """onnx.checker, then onnxruntime on random inputs: outputs finite, and not constant where
    the weights are random. Returns onnxruntime's best latency in ms over at least `repeats`
    runs and `min_seconds` (the best, not the median: other processes on a shared machine only
    ever slow a run down)."""
    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = spec.inputs_for(small)
    declared = {i.name: (list(i.shape), i.dtype) for i in inputs}
    found = {i.name: (i.shape, i.type.removeprefix("tensor(").removesuffix(")").replace(
        "float", "float32")) for i in session.get_inputs()}
    if found != declared:
        raise AssertionError(f"{spec.name}: inputs {found}, the manifest says {declared}")
    rng = np.random.default_rng(SEED)
    feed = {i.name: i.draw(rng) for i in inputs}
    outputs = session.run(None, feed)
    for out in outputs:
        if not np.isfinite(out).all():
            raise AssertionError(f"{spec.name}: onnxruntime's output is not finite")
    if spec.light is None and max(float(np.std(o)) for o in outputs) == 0.0:
        raise AssertionError(f"{spec.name}: onnxruntime's output is constant")
    times: list[float] = []
    end = time.perf_counter() + min_seconds
    while len(times) < repeats or time.perf_counter() < end:
        start = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def count_tasks(path: Path) -> int:
    """harl's import and task extraction for the CPU target (as `python -m harl.tune` does)."""
    from benchlib.models import count_tasks as count

    return count(path, None)


def compare_untuned(spec: Spec, path: Path, small: bool) -> float:
    """harl's import and an untuned TVM build (default schedules) on the CPU against onnxruntime,
    on the same random inputs, within harl's output tolerances. Returns the largest absolute
    difference."""
    from harl.config import VerifyConfig
    from harl.evaluate import CompiledModel, OnnxRuntimeModel, check_outputs, compile_model
    from harl.frontend.onnx_model import import_model, load_onnx
    from harl.target import parse_target
    from harl.tvm_env import load_tensor_intrinsics

    target = parse_target(None)
    load_tensor_intrinsics(target)
    model = load_onnx(path)
    imported, mod = import_model(model, fast_math=True)
    compiled = CompiledModel(compile_model(mod, target), target,
                             [i.name for i in imported.inputs])
    rng = np.random.default_rng(SEED)
    feed = {i.name: i.draw(rng) for i in spec.inputs_for(small)}
    got = compiled.run(feed)
    want = OnnxRuntimeModel(model, threads=2).run(feed)
    tolerance = VerifyConfig()
    result = check_outputs(got, want, [str(i) for i in range(len(want))], rtol=tolerance.rtol,
                           atol=tolerance.atol)
    if not result.verified:
        raise AssertionError(f"{spec.name}: TVM's output {result.worst_output} differs from "
                             f"onnxruntime's by up to {result.max_abs_err:.3g}")
    return result.max_abs_err


def chosen(*, split: str, only: list[str] | None) -> list[Spec]:
    """The models of `split` ("all": both), only those named in `only` where given."""
    models = specs()
    which = splits(models)
    return [s for s in models if (split == "all" or which[s.name] == split)
            and (not only or s.name in only)]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def shape_text(inputs) -> str:
    return " ".join(f"{name}:{'x'.join(map(str, v['shape']))}"
                    + ("" if v["dtype"] == "float32" else f"({v['dtype']})")
                    for name, v in inputs.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "logs" / "corpus")
    parser.add_argument("--split", choices=[DEV, HELD_OUT, "all"], default="all")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these models")
    parser.add_argument("--list", action="store_true", help="print the manifest and exit")
    parser.add_argument("--small", action="store_true",
                        help="reduced widths, depths and resolutions (a quick check)")
    parser.add_argument("--tasks", action="store_true",
                        help="also import each model into harl and count its tuning tasks")
    parser.add_argument("--compare", action="store_true",
                        help="also build each model with random weights untuned with TVM "
                        "through harl's import and compare its outputs with onnxruntime's")
    parser.add_argument("--write-manifest", action="store_true",
                        help=f"rewrite {MANIFEST.relative_to(ROOT)} and exit")
    args = parser.parse_args(argv)

    if args.write_manifest:
        MANIFEST.write_text(manifest_text())
        print(f"wrote {MANIFEST}")
        return 0
    unknown = sorted(set(args.only or ()) - {s.name for s in specs()})
    if unknown:
        parser.error(f"no corpus model {', '.join(unknown)} (see --list)")
    models = chosen(split=args.split, only=args.only)
    records = {r["name"]: r for r in manifest()}
    if args.list:
        rows = [["name", "family", "split", "inputs", "source"]]
        rows += [[s.name, s.family, records[s.name]["split"],
                  shape_text(records[s.name]["inputs"]), s.source] for s in models]
        print(table(rows))
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    header = ["name", "family", "split", "onnxruntime best ms"]
    header += (["tasks"] if args.tasks else []) + (["TVM vs onnxruntime"] if args.compare else [])
    rows = [header]
    for spec in models:
        path = export(spec, args.out, args.small)
        ort_ms = (check(spec, path, small=True, repeats=1, min_seconds=0.0) if args.small
                  else check(spec, path, small=False))
        row = [spec.name, spec.family, records[spec.name]["split"], f"{ort_ms:.2f}"]
        if args.tasks:
            row.append(str(count_tasks(path)))
        if args.compare:  # constant weights make every output alike: nothing to compare
            row.append("-" if spec.light else f"{compare_untuned(spec, path, args.small):.2g}")
        rows.append(row)
        details = ", ".join(f"{h} {v}" for h, v in zip(header[3:], row[3:], strict=True))
        print(f"wrote {path}  ({details})", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
