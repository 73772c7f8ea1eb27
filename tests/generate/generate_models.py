#!/usr/bin/env python3
"""Regenerates tests/models/ (all but llama.py's folders): small-config models of the families
people actually run, exported by PyTorch, with onnxruntime's outputs as the reference.

Needs torch (any recent CPU build), onnxscript (for the dynamo exporter), onnx==1.22.0,
onnxruntime and numpy. Each family is exported twice:

- `<family>_static`: the TorchScript ("legacy") exporter at the opset noted per family, every
  size fixed;
- `<family>_dynamic`: the dynamo exporter (torch.export) with symbolic batch (and sequence, for
  the sequence models) sizes, and several data sets of different sizes.

Weights are random but re-drawn with spreads that keep activations alive (a freshly initialised
LayerNorm is the identity; a deep random net can collapse to a constant), and every output is
checked for non-finite or constant values. Seeds come from the model's name.
"""

import argparse
import io
import math
import os
import shutil
import sys
import warnings
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
MAX_MODEL_BYTES = 2 * 1024 * 1024


def seed(name):
    torch.manual_seed(zlib.crc32(name.encode()))


def reinit(model, name):
    """Random weights with O(1) activations: normal(0, 1/sqrt(fan_in)) for weights, small
    normal for biases, LayerNorm/BatchNorm affine terms away from the identity, and BatchNorm
    running statistics that are not 0/1."""
    seed(name + "/weights")
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d)):
            fan_in = m.weight[0].numel()
            nn.init.normal_(m.weight, 0.0, 1.0 / math.sqrt(fan_in))
            if m.bias is not None:
                nn.init.normal_(m.bias, 0.0, 0.1)
        elif isinstance(m, (nn.LayerNorm, nn.BatchNorm2d)):
            nn.init.normal_(m.weight, 1.0, 0.2)
            nn.init.normal_(m.bias, 0.0, 0.1)
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 1.0)
    for p in model.parameters(recurse=False):
        nn.init.normal_(p, 0.0, 0.5)
    model.eval()
    return model


# ---------------------------------------------------------------------------------------------
# CNNs


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """ResNet-18's shape at a fraction of the width: stem, four stages, pool, classifier."""

    def __init__(self, widths=(8, 16, 24, 32), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV2(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        cfg = [(1, 8, 1, 1), (4, 12, 2, 2), (4, 16, 2, 2), (4, 24, 1, 2), (4, 32, 1, 1)]
        layers = [nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()]
        cin = 8
        for t, c, n, s in cfg:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x):
        x = self.features(x).mean([2, 3])
        return self.classifier(x)


def conv_bn_silu(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class TinyYolo(nn.Module):
    """A YOLO-style detector: a strided SiLU backbone, an upsample-and-concatenate neck, and a
    head that decodes boxes on a grid (sigmoid, grid offsets, anchors) for two scales."""

    def __init__(self, classes=3, anchors=2):
        super().__init__()
        self.na, self.no = anchors, classes + 5
        self.b1 = nn.Sequential(conv_bn_silu(3, 8, 3, 2), conv_bn_silu(8, 16, 3, 2), conv_bn_silu(16, 16))
        self.b2 = nn.Sequential(conv_bn_silu(16, 24, 3, 2), conv_bn_silu(24, 24))
        self.b3 = nn.Sequential(conv_bn_silu(24, 32, 3, 2), conv_bn_silu(32, 32, 1))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.neck = conv_bn_silu(32 + 24, 24)
        self.head_small = nn.Conv2d(24, anchors * self.no, 1)
        self.head_large = nn.Conv2d(32, anchors * self.no, 1)
        self.register_buffer("anchor_wh", torch.tensor([[1.0, 1.5], [2.0, 1.0]]))

    def decode(self, p, stride):
        b, _, h, w = p.shape
        p = p.view(b, self.na, self.no, h, w).permute(0, 1, 3, 4, 2).sigmoid()
        ys = torch.arange(h, dtype=torch.float32).view(1, 1, h, 1).expand(1, 1, h, w)
        xs = torch.arange(w, dtype=torch.float32).view(1, 1, 1, w).expand(1, 1, h, w)
        grid = torch.stack((xs, ys), -1)
        xy = (p[..., 0:2] * 2 - 0.5 + grid) * stride
        wh = (p[..., 2:4] * 2) ** 2 * self.anchor_wh.view(1, self.na, 1, 1, 2) * stride
        return torch.cat((xy, wh, p[..., 4:]), -1).reshape(b, -1, self.no)

    def forward(self, x):
        c2 = self.b2(self.b1(x))
        c3 = self.b3(c2)
        n = self.neck(torch.cat((self.up(c3), c2), 1))
        return torch.cat((self.decode(self.head_small(n), 8), self.decode(self.head_large(c3), 16)), 1)


# ---------------------------------------------------------------------------------------------
# Transformers


class Attention(nn.Module):
    def __init__(self, dim, heads, causal=False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        if self.causal:
            keep = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~keep, float("-inf"))
        if mask is not None:
            att = att + mask
        att = att.softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class EncoderLayer(nn.Module):
    """Post-norm (BERT) or pre-norm (GPT-2, ViT, Whisper) transformer layer."""

    def __init__(self, dim, heads, pre_norm, causal=False, gelu="none"):
        super().__init__()
        self.pre = pre_norm
        self.attn = Attention(dim, heads, causal)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate=gelu), nn.Linear(4 * dim, dim))

    def forward(self, x, mask=None):
        if self.pre:
            x = x + self.attn(self.ln1(x), mask)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.mlp(x))


class Bert(nn.Module):
    def __init__(self, vocab=500, dim=32, heads=4, layers=2, max_len=64):
        super().__init__()
        self.tok, self.pos, self.typ = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim), nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, False) for _ in range(layers))
        self.pool = nn.Linear(dim, dim)

    def forward(self, input_ids, attention_mask):
        t = input_ids.shape[1]
        pos = torch.arange(t).unsqueeze(0)
        x = self.ln(self.tok(input_ids) + self.pos(pos) + self.typ(torch.zeros_like(input_ids)))
        # 0 where attended, a large negative where masked, broadcast over heads and queries.
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


class Gpt2(nn.Module):
    def __init__(self, vocab=500, dim=32, heads=4, layers=2, max_len=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, True, causal=True, gelu="tanh") for _ in range(layers))
        self.ln = nn.LayerNorm(dim)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        x = self.tok(input_ids) + self.pos(torch.arange(t).unsqueeze(0))
        for layer in self.layers:
            x = layer(x)
        # Tied embeddings, as GPT-2 does.
        return self.ln(x) @ self.tok.weight.t()


class Vit(nn.Module):
    def __init__(self, image=32, patch=8, dim=32, heads=4, layers=2, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, True) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), 1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x)[:, 0])


class WhisperEncoder(nn.Module):
    """Whisper's audio encoder: two Conv1d with GELU (the second strided), sinusoidal
    positions, pre-norm layers."""

    def __init__(self, mels=16, dim=32, heads=4, layers=2, max_frames=64):
        super().__init__()
        self.c1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.c2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        pos = torch.arange(max_frames)[:, None] / (10000 ** (torch.arange(0, dim, 2)[None, :] / dim))
        self.register_buffer("pos", torch.cat((pos.sin(), pos.cos()), 1))
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, True) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)

    def forward(self, mel):
        x = nn.functional.gelu(self.c1(mel))
        x = nn.functional.gelu(self.c2(x)).transpose(1, 2)
        x = x + self.pos[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.ln(x)


# ---------------------------------------------------------------------------------------------
# Recurrent


class LstmTagger(nn.Module):
    """A sequence tagger: embeddings, a two-layer bidirectional LSTM, per-token tag scores."""

    def __init__(self, vocab=200, dim=24, hidden=32, tags=9):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, input_ids):
        y, _ = self.lstm(self.emb(input_ids))
        return self.out(y)


class GruClassifier(nn.Module):
    """A GRU over feature frames (batch first), classified from its last hidden state."""

    def __init__(self, features=16, hidden=32, classes=5):
        super().__init__()
        self.gru = nn.GRU(features, hidden, num_layers=2, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        _, h = self.gru(x)
        return self.out(h[-1])


# ---------------------------------------------------------------------------------------------
# Families: (name, model, legacy opset, input makers for (batch, seq), static size, dynamic
# sizes, dynamic axes per input)


def images(c, hw):
    return lambda rng, b, _s: {"x": rng.standard_normal((b, c, hw, hw)).astype(np.float32)}


def tokens(vocab, with_mask):
    def make(rng, b, s):
        feeds = {"input_ids": rng.integers(0, vocab, size=(b, s), dtype=np.int64)}
        if with_mask:
            mask = np.ones((b, s), dtype=np.int64)
            # Pad the tail of every other row, so masking is exercised.
            mask[1::2, s - s // 3:] = 0
            feeds["attention_mask"] = mask
        return feeds
    return make


def frames(features):
    return lambda rng, b, s: {"x": rng.standard_normal((b, s, features)).astype(np.float32)}


def mel(mels):
    return lambda rng, b, s: {"mel": rng.standard_normal((b, mels, s)).astype(np.float32)}


FAMILIES = [
    # name, constructor, legacy opset, feeds, static (b, s), dynamic [(b, s)...], dyn axes, outputs
    ("resnet", ResNet, 11, images(3, 32), (1, 0), [(2, 0), (3, 0)], {"x": {0: "batch"}}, ["logits"]),
    ("mobilenetv2", MobileNetV2, 13, images(3, 32), (1, 0), [(2, 0), (4, 0)], {"x": {0: "batch"}}, ["logits"]),
    ("yolo", TinyYolo, 13, images(3, 64), (1, 0), [(2, 0), (1, 0)], {"x": {0: "batch"}}, ["detections"]),
    ("bert", Bert, 14, tokens(500, True), (2, 16), [(2, 12), (3, 20)],
     {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}, ["hidden", "pooled"]),
    ("gpt2", Gpt2, 17, tokens(500, False), (1, 16), [(2, 9), (1, 24)],
     {"input_ids": {0: "batch", 1: "seq"}}, ["logits"]),
    ("vit", Vit, 17, images(3, 32), (1, 0), [(2, 0), (3, 0)], {"x": {0: "batch"}}, ["logits"]),
    ("whisper_encoder", WhisperEncoder, 17, mel(16), (1, 32), [(2, 20), (1, 40)],
     {"mel": {0: "batch", 2: "frames"}}, ["hidden"]),
    ("lstm_tagger", LstmTagger, 14, tokens(200, False), (2, 12), [(2, 10), (3, 16)],
     {"input_ids": {0: "batch", 1: "seq"}}, ["tags"]),
    ("gru", GruClassifier, 14, frames(16), (2, 12), [(2, 10), (3, 16)],
     {"x": {0: "batch", 1: "frames"}}, ["logits"]),
]


def export_legacy(model, args, names, outputs, opset):
    f = io.BytesIO()
    torch.onnx.export(model, args, f, dynamo=False, opset_version=opset, input_names=names,
                      output_names=outputs, do_constant_folding=True)
    return onnx.load_from_string(f.getvalue())


def export_dynamo(model, args, names, outputs, dyn_axes):
    dims = {}
    shapes = []
    for n in names:
        axes = {}
        for ax, sym in dyn_axes.get(n, {}).items():
            if sym not in dims:
                # Sizes below 2 would let torch.export specialise the dim to a constant.
                dims[sym] = torch.export.Dim(sym, min=2 if sym != "batch" else 1, max=64)
            axes[ax] = dims[sym]
        shapes.append(axes)
    program = torch.onnx.export(model, args, dynamo=True, opset_version=18, input_names=names,
                                output_names=outputs, dynamic_shapes=tuple(shapes), verbose=False)
    return program.model_proto


def to_torch(feeds):
    return tuple(torch.from_numpy(v) for v in feeds.values())


def finish(model_proto):
    """Stable producer fields and a check, so a rerun gives comparable files."""
    model_proto.producer_name = "vkml-models (torch " + torch.__version__.split("+")[0] + ")"
    onnx.checker.check_model(model_proto, full_check=True)
    return model_proto


def generate(root, only=None):
    for name, ctor, opset, make_feeds, static, dynamic, dyn_axes, outputs in FAMILIES:
        if only and name not in only:
            continue
        seed(name)
        model = reinit(ctor(), name)
        rng = common.rng_for(name + "/inputs")
        feeds = make_feeds(rng, *static)
        names = list(feeds)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            static_proto = finish(export_legacy(model, to_torch(feeds), names, outputs, opset))
            example = make_feeds(rng, *dynamic[0])
            dynamic_proto = finish(export_dynamo(model, to_torch(example), names, outputs, dyn_axes))
        for suffix, proto, sets in (
            ("static", static_proto, [feeds, make_feeds(rng, *static)]),
            ("dynamic", dynamic_proto, [make_feeds(rng, *bs) for bs in dynamic]),
        ):
            fixture = f"{name}_{suffix}"
            d = common.save_fixture(root, fixture, proto, sets)
            size = os.path.getsize(os.path.join(d, "model.onnx"))
            if size > MAX_MODEL_BYTES:
                raise SystemExit(f"{fixture}: model.onnx is {size} bytes, over {MAX_MODEL_BYTES}")
            # The reference also has to agree with PyTorch itself, or the export is suspect.
            with torch.no_grad():
                want = model(*to_torch(sets[0]))
            want = want if isinstance(want, tuple) else (want,)
            got = common.run_reference(proto, sets[0])
            for (oname, arr), w in zip(got, want):
                err = np.max(np.abs(arr - w.numpy())) / (np.max(np.abs(w.numpy())) + 1e-6)
                if err > 1e-4:
                    raise SystemExit(f"{fixture}: onnxruntime and torch disagree on {oname} ({err:.2e})")
            ops = sorted({n.op_type for n in proto.graph.node})
            print(f"{fixture}: {size / 1024:.0f} KiB, opset {proto.opset_import[0].version}, {len(ops)} op types: {' '.join(ops)}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=os.path.join(REPO, "tests", "models"))
    p.add_argument("only", nargs="*", help="families to regenerate (default: all)")
    args = p.parse_args()
    # Only this script's folders: tests/models/ also holds llama.py's (llama_optimum, llama_genai).
    for name, *_ in FAMILIES:
        for suffix in ("static", "dynamic"):
            d = os.path.join(args.out, f"{name}_{suffix}")
            if (not args.only or name in args.only) and os.path.isdir(d):
                shutil.rmtree(d)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, ".gitattributes"), "w") as f:
        f.write(common_gitattributes())
    generate(args.out, set(args.only))


def common_gitattributes():
    return "# Generated binaries: never diffed or merged as text.\n*.onnx binary\n*.pb binary\n*.data binary\n"


if __name__ == "__main__":
    main()
