#!/usr/bin/env python3
"""Real-sized models for the CPU table of issue 24 (benches/cpu-table.sh), made at benchmark time
with fixed seeds (random weights: timings do not depend on trained values), and the helpers the
table needs around them.

  cpu_models.py make OUT                     # OUT/<name>.onnx and OUT/<name>_<input>.npy
  cpu_models.py feeds MODEL DATA PREFIX [B]  # DATA/input_<i>.pb as PREFIX_<input>.npy, batch B
  cpu_models.py ort MODEL REPEAT FILE...     # onnxruntime's median (us) on FILE.npy inputs
                                             # (outputs to $ORT_OUT_DIR/out<i>.npy when set)
  cpu_models.py compare TOL MINE... -- ORT... # `ok` or `MISMATCH <max abs err>`

Every model is written by hand in plain torch and exported by the TorchScript exporter
(dynamo=False: it is the more robust one for these layouts) at opset 17, batch 1, static shapes,
IR version <= 10 so that older onnxruntime builds load it. BatchNorm layers get running statistics
of the size trained ones have (mean near 0, variance near 1), so activations neither explode nor
vanish through dozens of layers; the exporter folds BatchNorm into the convolutions in eval mode,
as deployments do.
"""

import os
import sys
import time

import numpy as np

OPSET = 17
IR_VERSION = 10


# ----------------------------------------------------------------------------------------------
# Shared pieces


def init_weights(model, seed):
    """Seeded weights of a sane scale: He-normal convolutions, BatchNorm near the identity."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.1)
            nn.init.normal_(m.bias, 0.0, 0.1)
            m.running_mean.normal_(0.0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            nn.init.zeros_(m.bias)
    return model.eval()


def export(model, inputs, path):
    """inputs: {name: tensor}. One output per returned tensor, named out0, out1, ... (plain names,
    so vkml-node writes them as out0.npy, ...)."""
    import onnx
    import torch

    args = tuple(inputs.values())
    with torch.no_grad():
        outs = model(*args)
    n_out = len(outs) if isinstance(outs, (tuple, list)) else 1
    torch.onnx.export(model, args, path, dynamo=False, opset_version=OPSET,
                      input_names=list(inputs), output_names=[f"out{i}" for i in range(n_out)])
    m = onnx.load(path)
    if m.ir_version > IR_VERSION:
        # The exporter may stamp a newer IR than onnxruntime accepts; nothing here needs it.
        m.ir_version = IR_VERSION
        onnx.save(m, path)
    onnx.checker.check_model(path)
    prefix = path[:-len(".onnx")]
    for name, t in inputs.items():
        np.save(f"{prefix}_{name}.npy", t.numpy())


def image(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------------------------
# SqueezeNet 1.1


def squeezenet11():
    """SqueezeNet 1.1 (Iandola et al.; the torchvision layout, 1.2 M parameters) at 224x224: the
    classic small ImageNet classifier, many small 1x1/3x3 convolutions and concatenations, the
    shape where per-op overhead rather than arithmetic decides the latency."""
    import torch
    from torch import nn

    class Fire(nn.Module):
        def __init__(self, cin, squeeze, e1, e3):
            super().__init__()
            self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True))
            self.e1 = nn.Sequential(nn.Conv2d(squeeze, e1, 1), nn.ReLU(inplace=True))
            self.e3 = nn.Sequential(nn.Conv2d(squeeze, e3, 3, padding=1), nn.ReLU(inplace=True))

        def forward(self, x):
            s = self.squeeze(x)
            return torch.cat([self.e1(s), self.e3(s)], 1)

    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), pool(),
        Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
        Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(),
        Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
        Fire(512, 64, 256, 256),
        nn.Conv2d(512, 1000, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def make_squeezenet(out):
    import torch

    model = init_weights(squeezenet11(), 11)
    # He init keeps the ReLU activations at unit scale; the 1000 logits then sum O(1000) terms,
    # comfortably inside float16's range for the fp16 copy below.
    x = torch.from_numpy(image((1, 3, 224, 224), 1))
    export(model, {"x": x}, os.path.join(out, "squeezenet11.onnx"))
    make_squeezenet_fp16(model, x, out)


def make_squeezenet_fp16(model, x, out):
    """The same network with float16 weights, activations and I/O: the exporter traces the
    .half() module, so every Conv/Relu/MaxPool/Concat in the graph is a float16 op (no Casts),
    which is what a user's fp16 deployment of the model looks like. Tracing runs the float16
    forward once on the CPU, which PyTorch supports for these ops."""
    export(model.half(), {"x": x.half()}, os.path.join(out, "squeezenet11_fp16.onnx"))
    model.float()


# ----------------------------------------------------------------------------------------------
# YOLOv8n-style detector


def yolov8n_like():
    """An honest approximation of Ultralytics' YOLOv8n written here in plain torch (not their
    code): Conv = Conv+BN+SiLU, C2f blocks, SPPF, the PAN neck and the decoupled, anchor-free
    detect head with its DFL box decoding (softmax over 16 bins), at width 0.25 and depth 0.33
    (channels 16..256, C2f repeats 1/2/2/1), 80 classes. At 320x320 the head sees 40x40, 20x20 and
    10x10 grids (2100 anchors); the output is (1, 84, 2100): 4 box coordinates (xywh, pixels) and
    80 class probabilities, as YOLOv8 exports emit."""
    import torch
    from torch import nn

    class Conv(nn.Sequential):
        def __init__(self, cin, cout, k=1, s=1):
            super().__init__(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout),
                             nn.SiLU())

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut):
            super().__init__()
            self.body = nn.Sequential(Conv(c, c, 3), Conv(c, c, 3))
            self.add = shortcut

        def forward(self, x):
            return x + self.body(x) if self.add else self.body(x)

    class C2f(nn.Module):
        def __init__(self, cin, cout, n, shortcut):
            super().__init__()
            self.c = cout // 2
            self.cv1 = Conv(cin, 2 * self.c)
            self.cv2 = Conv((2 + n) * self.c, cout)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            ys = list(self.cv1(x).split((self.c, self.c), 1))
            for m in self.m:
                ys.append(m(ys[-1]))
            return self.cv2(torch.cat(ys, 1))

    class SPPF(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.cv1 = Conv(cin, cin // 2)
            self.cv2 = Conv(cin * 2, cout)
            self.pool = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            for _ in range(3):
                y.append(self.pool(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class Detect(nn.Module):
        def __init__(self, chs, nc=80, reg_max=16):
            super().__init__()
            self.nc, self.reg_max = nc, reg_max
            c2, c3 = max(16, chs[0] // 4, reg_max * 4), max(chs[0], min(nc, 100))
            self.box = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3),
                                                   nn.Conv2d(c2, 4 * reg_max, 1)) for c in chs)
            self.cls = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3),
                                                   nn.Conv2d(c3, nc, 1)) for c in chs)

        def forward(self, feats, strides=(8, 16, 32)):
            b = feats[0].shape[0]
            outs, anchors, scale = [], [], []
            for i, f in enumerate(feats):
                outs.append(torch.cat([self.box[i](f), self.cls[i](f)], 1).flatten(2))
                # Cell centres in grid units, from Python ints and in float32, so the tracer
                # freezes them as float32 constants (static size) rather than tracing shapes.
                h, w = int(f.shape[2]), int(f.shape[3])
                ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5,
                                        torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
                anchors.append(torch.stack([xs.flatten(), ys.flatten()]))
                scale.append(torch.full((1, h * w), float(strides[i])))
            y = torch.cat(outs, 2)
            anchors, scale = torch.cat(anchors, 1), torch.cat(scale, 1)
            box, cls = y.split((4 * self.reg_max, self.nc), 1)
            # DFL: each side's distance is the expectation over reg_max bins.
            bins = torch.arange(self.reg_max, dtype=torch.float32).view(1, 1, -1, 1)
            dist = (box.view(b, 4, self.reg_max, -1).softmax(2) * bins).sum(2)
            lt, rb = dist.split(2, 1)
            x1y1, x2y2 = anchors - lt, anchors + rb
            xywh = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * scale
            return torch.cat([xywh, cls.sigmoid()], 1)

    class YOLO(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(Conv(3, 16, 3, 2), Conv(16, 32, 3, 2), C2f(32, 32, 1, True))
            self.p3 = nn.Sequential(Conv(32, 64, 3, 2), C2f(64, 64, 2, True))
            self.p4 = nn.Sequential(Conv(64, 128, 3, 2), C2f(128, 128, 2, True))
            self.p5 = nn.Sequential(Conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.top4 = C2f(384, 128, 1, False)
            self.out3 = C2f(192, 64, 1, False)
            self.down3 = Conv(64, 64, 3, 2)
            self.out4 = C2f(192, 128, 1, False)
            self.down4 = Conv(128, 128, 3, 2)
            self.out5 = C2f(384, 256, 1, False)
            self.detect = Detect((64, 128, 256))

        def forward(self, x):
            p3 = self.p3(self.stem(x))
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            t4 = self.top4(torch.cat([self.up(p5), p4], 1))
            n3 = self.out3(torch.cat([self.up(t4), p3], 1))
            n4 = self.out4(torch.cat([self.down3(n3), t4], 1))
            n5 = self.out5(torch.cat([self.down4(n4), p5], 1))
            return self.detect([n3, n4, n5])

    return YOLO()


def make_yolo(out):
    import torch

    model = init_weights(yolov8n_like(), 8)
    export(model, {"images": torch.from_numpy(image((1, 3, 320, 320), 2))},
           os.path.join(out, "yolov8n_320.onnx"))


# ----------------------------------------------------------------------------------------------
# DB-style text detector


def db_text_detector():
    """A DBNet-style text detector (Liao et al., as in PaddleOCR's and mmocr's DB heads) written
    here: a ResNet-18 backbone (BasicBlocks 2-2-2-2, widths 64..512), an FPN (1x1 laterals to
    256 channels, nearest 2x top-down upsampling and adds, 3x3 smoothing to 64 channels, every
    level upsampled to 1/4 and concatenated), and the probability head (3x3 conv, BN, ReLU, two
    stride-2 transposed convolutions back to full size, sigmoid). 160x160 is the small crop size
    OCR pipelines feed such detectors on phones; the output is the (1, 1, 160, 160) map."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def cbr(cin, cout, k, s=1):
        return [nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout)]

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(*cbr(cin, cout, 3, stride), nn.ReLU(inplace=True),
                                      *cbr(cout, cout, 3))
            self.down = (nn.Sequential(*cbr(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    class DB(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(*cbr(3, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
            widths, cin, stages = (64, 128, 256, 512), 64, []
            for i, w in enumerate(widths):
                stages.append(nn.Sequential(Basic(cin, w, 1 if i == 0 else 2), Basic(w, w, 1)))
                cin = w
            self.stages = nn.ModuleList(stages)
            self.lateral = nn.ModuleList(nn.Conv2d(w, 256, 1, bias=False) for w in widths)
            self.smooth = nn.ModuleList(nn.Conv2d(256, 64, 3, padding=1, bias=False) for _ in widths)
            self.head = nn.Sequential(
                *cbr(256, 64, 3), nn.ReLU(inplace=True),
                nn.ConvTranspose2d(64, 64, 2, 2), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                nn.ConvTranspose2d(64, 1, 2, 2), nn.Sigmoid())

        def forward(self, x):
            feats, y = [], self.stem(x)
            for s in self.stages:
                y = s(y)
                feats.append(y)
            lat = [conv(f) for conv, f in zip(self.lateral, feats)]
            for i in (2, 1, 0):
                lat[i] = lat[i] + F.interpolate(lat[i + 1], scale_factor=2.0, mode="nearest")
            maps = [conv(f) for conv, f in zip(self.smooth, lat)]
            maps = [maps[0]] + [F.interpolate(m, scale_factor=2.0 ** i, mode="nearest")
                                for i, m in enumerate(maps[1:], 1)]
            return self.head(torch.cat(maps, 1))

    return DB()


def make_db(out):
    import torch

    model = init_weights(db_text_detector(), 18)
    # He init leaves the map's logits in the hundreds, a sigmoid saturated to exact 0s and 1s that
    # would hide a wrong result from the output check; small last weights give logits of O(1).
    torch.nn.init.normal_(model.head[-2].weight, 0.0, 0.003)
    export(model, {"x": torch.from_numpy(image((1, 3, 160, 160), 3))},
           os.path.join(out, "db_text_160.onnx"))


# ----------------------------------------------------------------------------------------------
# MobileNetV2


def mobilenetv2():
    """MobileNetV2 (Sandler et al.; the torchvision layout written here), width 1.0, 224x224:
    3.5 M parameters, inverted residuals of depthwise 3x3 convolutions between 1x1 expansions,
    ReLU6 (exported as Clip). Depthwise convolutions are memory-bound, unlike SqueezeNet's."""
    import torch
    from torch import nn

    def cbr(cin, cout, k, s=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + [nn.ReLU6(inplace=True)] if act else layers

    class Inverted(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hid = cin * expand
            layers = cbr(cin, hid, 1) if expand != 1 else []
            layers += cbr(hid, hid, 3, stride, groups=hid) + cbr(hid, cout, 1, act=False)
            self.body = nn.Sequential(*layers)
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    layers, cin = cbr(3, 32, 3, 2), 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            layers.append(Inverted(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += cbr(cin, 1280, 1)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000))


def make_mobilenetv2(out):
    import torch

    model = init_weights(mobilenetv2(), 2)
    export(model, {"x": torch.from_numpy(image((1, 3, 224, 224), 4))},
           os.path.join(out, "mobilenetv2_224.onnx"))


# ----------------------------------------------------------------------------------------------
# BERT-tiny


def bert_tiny():
    """A BERT-tiny encoder (Turc et al.'s google/bert_uncased_L-2_H-128_A-2 shape, written here):
    2 layers, hidden 128, 2 heads, intermediate 512, vocabulary 30522, 512 positions, post-norm
    LayerNorm, exact (erf) GELU, the additive attention mask of HuggingFace's BERT. Sequence 128
    is a typical classification length; the 15.6 MB word embedding dominates the file, not the
    compute, which makes this a test of small-matmul and per-op overhead."""
    import torch
    from torch import nn

    hidden, heads, inter = 128, 2, 512

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(3))
            self.proj = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.ff = nn.Sequential(nn.Linear(hidden, inter), nn.GELU(), nn.Linear(inter, hidden))
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, bias):
            b, s, _ = x.shape
            q, k, v = (l(x).view(b, s, heads, -1).transpose(1, 2) for l in self.qkv)
            att = (q @ k.transpose(2, 3)) / (hidden // heads) ** 0.5 + bias
            ctx = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hidden)
            x = self.ln1(x + self.proj(ctx))
            return self.ln2(x + self.ff(x))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.words = nn.Embedding(30522, hidden)
            self.pos = nn.Embedding(512, hidden)
            self.types = nn.Embedding(2, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(2))

        def forward(self, input_ids, attention_mask):
            s = input_ids.shape[1]
            x = self.words(input_ids) + self.pos.weight[:s] + self.types.weight[0]
            x = self.ln(x)
            # Padded keys get a large negative bias, as HuggingFace's extended mask does.
            bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
            for layer in self.layers:
                x = layer(x, bias)
            return x

    model = Bert()
    torch.manual_seed(128)
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)  # BERT's initializer range
    return model.eval()


def make_bert(out):
    import torch

    seq = 128
    rng = np.random.default_rng(5)
    ids = rng.integers(1000, 30522, (1, seq)).astype(np.int64)
    ids[0, 0] = 101  # [CLS]
    mask = np.ones((1, seq), np.int64)
    mask[0, 100:] = 0  # a padded tail, so the mask does real work
    ids[0, 100:] = 0
    export(bert_tiny(), {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)},
           os.path.join(out, "bert_tiny_128.onnx"))


# ----------------------------------------------------------------------------------------------
# Commands


def make(out):
    os.makedirs(out, exist_ok=True)
    for fn in (make_squeezenet, make_yolo, make_db, make_mobilenetv2, make_bert):
        fn(out)


def feeds(model, data, prefix, batch=None):
    """The test_data_set's inputs as PREFIX_<input>.npy; with a batch, each input's rows repeated
    cyclically along axis 0 to that many (the dynamic models' test sets have 2 rows, so batch 8
    is those 2 rows 4 times). Prints `name=file` arguments for vkml-node run."""
    import glob

    import onnx
    from onnx import numpy_helper

    m = onnx.load(model, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    files = sorted(glob.glob(os.path.join(data, "input_*.pb")),
                   key=lambda f: int(f.rsplit("_", 1)[1].split(".")[0]))
    args = []
    for name, f in zip(names, files):
        x = numpy_helper.to_array(onnx.load_tensor(f))
        if batch is not None:
            x = x[np.arange(int(batch)) % x.shape[0]]
        path = f"{prefix}_{name}.npy"
        np.save(path, x)
        args.append(f"{name}={path}")
    print(" ".join(args))


def ort_median(model, repeat, *files):
    """onnxruntime's CPU provider with default SessionOptions (all cores, all graph optimisations),
    inputs fed in graph order from FILE.npy; after warm-up runs, the median of REPEAT timed runs,
    each including the output copy to numpy as vkml's includes its outputs reaching the host.
    With ORT_OUT_DIR set, the outputs of the last warm-up run go there as out<i>.npy, for
    `compare`. The warm-up (a quarter of REPEAT, 3 to 50 runs) lets the arena and the thread pool
    settle before timing."""
    import onnxruntime as ort

    repeat = int(repeat)
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {i.name: np.load(f) for i, f in zip(s.get_inputs(), files)}
    for _ in range(max(3, min(50, repeat // 4))):
        outs = s.run(None, feed)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        s.run(None, feed)
        times.append(time.perf_counter_ns() - t0)
    dump = os.environ.get("ORT_OUT_DIR")
    if dump:
        os.makedirs(dump, exist_ok=True)
        for i, o in enumerate(outs):
            np.save(os.path.join(dump, f"out{i}.npy"), o)
    print(f"{np.median(times) / 1000.0:.1f}")


def compare(tol, *files):
    """Pairs vkml's outputs with onnxruntime's, in graph order: `ok`, or `MISMATCH <max abs err>`
    when any element is off by more than atol + rtol*|ort|, with rtol = tol and atol = tol/10
    times the output's largest magnitude (at least 1). The scaling is because random-weight
    networks can have logits in the thousands (ResNet-50's reach 9e3): two correct f32 sums of
    that size differ by ~1e-3 absolute, which a fixed atol would call a mismatch in the entries
    that happen to lie near zero."""
    split = files.index("--")
    mine, theirs = files[:split], files[split + 1:]
    rtol = float(tol)
    if len(mine) != len(theirs):
        print(f"MISMATCH {len(mine)} outputs vs {len(theirs)}")
        return
    worst, bad = 0.0, False
    for a, b in zip(mine, theirs):
        x, y = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
        if x.shape != y.shape:
            print(f"MISMATCH shape {x.shape} vs {y.shape}")
            return
        if x.size:
            atol = rtol / 10 * max(1.0, float(np.max(np.abs(y))))
            worst = max(worst, float(np.max(np.abs(x - y))))
            bad |= not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    print(f"MISMATCH {worst:.3g}" if bad else "ok")


if __name__ == "__main__":
    commands = {"make": (make, 1, 1), "feeds": (feeds, 3, 4), "ort": (ort_median, 2, 99),
                "compare": (compare, 2, 99)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    fn, lo, hi = commands[sys.argv[1]]
    if not lo <= len(sys.argv) - 2 <= hi:
        sys.exit(__doc__)
    fn(*sys.argv[2:])
