#!/usr/bin/env python3
"""The large benchmark workloads, made on the GPU machine at benchmark time (too big to commit),
and PyTorch's timings of the same functions in the same run.

  big_models.py make OUT_DIR      # writes gemm_4096.onnx, resnet50.onnx (random weights)
  big_models.py torch OUT_DIR     # PyTorch CUDA eager timings of the same, as JSON lines
  big_models.py qdq OUT_DIR       # resnet50_qdq.onnx from resnet50.onnx (needs `make` first)

gemm_4096: Y = A @ B for 4096x4096 f32 matrices, A and B as weights, repeated REPS times in a
chain (Y1 = (A + x) @ B, Y2 = Y1 @ B, ...) so one run is several GEMMs, and only one row of the
last product is read back (Gather), so timings are the GEMMs, not PCIe. The input x (a single
0) makes the chain depend on a run-time value: with weights alone the planner would fold the
whole chain into a constant. Values are scaled so the chain stays O(1).

gemm_4096_f16 / gemm_4096_bf16: the same in half precision (the tensor-core path), HALF_REPS
products per run: A + x in f32, cast to the half type, HALF_REPS products by B (a half weight),
cast back to f32, one row gathered. The f32 perturbation and the casts (about 0.1 ms) count
against the products' time, so the TFLOP/s derived from it slightly understates the kernel.

resnet50: torchvision's ResNet-50 layout (bottleneck blocks 3-4-6-3, widths 64..2048) written
out here, random weights, exported with a symbolic batch by the TorchScript exporter (which
folds BatchNorm into the convolutions, as deployments do). 25.6 M parameters: 102 MB of f32,
which also serves the host-memory measurement.

resnet50_qdq: the same model statically quantized by onnxruntime.quantization as a user would
(QDQ format, int8 weights per output channel, uint8 activations, MinMax calibration on 8
random images; the exporter's graph optimised first, as quantize_static does by default).
"""

import json
import math
import os
import statistics
import sys
import time

import numpy as np

REPS = 4
HALF_REPS = 16
SIZE = 4096


def gemm_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4096)
    # Entries of N(0, 1/n): a product of such matrices keeps unit-size entries.
    a = (rng.standard_normal((SIZE, SIZE)) / math.sqrt(SIZE)).astype(np.float32)
    b = (rng.standard_normal((SIZE, SIZE)) / math.sqrt(SIZE)).astype(np.float32)
    nodes, prev = [helper.make_node("Add", ["A", "x"], ["a"], name="perturb")], "a"
    for i in range(REPS):
        out = f"y{i}"
        nodes.append(helper.make_node("MatMul", [prev, "B"], [out], name=f"gemm{i}"))
        prev = out
    nodes.append(helper.make_node("Gather", [prev, "row"], ["y"], axis=0, name="first_row"))
    graph = helper.make_graph(
        nodes, "gemm_4096", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                             helper.make_tensor_value_info("row", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SIZE])],
        [numpy_helper.from_array(a, "A"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save_model(model, path)


def half_gemm_model(path, half):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4096)
    a = (rng.standard_normal((SIZE, SIZE)) / math.sqrt(SIZE)).astype(np.float32)
    b = (rng.standard_normal((SIZE, SIZE)) / math.sqrt(SIZE)).astype(np.float32)
    if half == "f16":
        code, weight = TensorProto.FLOAT16, numpy_helper.from_array(b.astype(np.float16), "B")
    else:
        # numpy has no bfloat16: the top 16 bits of each f32, rounded to nearest even.
        bits = b.view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        code = TensorProto.BFLOAT16
        weight = helper.make_tensor("B", code, [SIZE, SIZE], bits.tobytes(), raw=True)
    nodes = [helper.make_node("Add", ["A", "x"], ["a32"], name="perturb"),
             helper.make_node("Cast", ["a32"], ["a"], to=code, name="to_half")]
    prev = "a"
    for i in range(HALF_REPS):
        out = f"y{i}"
        nodes.append(helper.make_node("MatMul", [prev, "B"], [out], name=f"gemm{i}"))
        prev = out
    nodes.append(helper.make_node("Cast", [prev], ["yf"], to=TensorProto.FLOAT, name="to_f32"))
    nodes.append(helper.make_node("Gather", ["yf", "row"], ["y"], axis=0, name="first_row"))
    graph = helper.make_graph(
        nodes, f"gemm_4096_{half}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                                     helper.make_tensor_value_info("row", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SIZE])],
        [numpy_helper.from_array(a, "A"), weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save_model(model, path)


def resnet50():
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000))
    torch.manual_seed(50)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.1)
            nn.init.normal_(m.bias, 0.0, 0.1)
            m.running_mean.normal_(0.0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def make(out):
    import torch

    os.makedirs(out, exist_ok=True)
    gemm_model(os.path.join(out, "gemm_4096.onnx"))
    for half in ("f16", "bf16"):
        half_gemm_model(os.path.join(out, f"gemm_4096_{half}.onnx"), half)
    model = resnet50()
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, (x,), os.path.join(out, "resnet50.onnx"), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "batch"}})
    for b in (1, 8):
        np.save(os.path.join(out, f"resnet50_x{b}.npy"),
                np.random.default_rng(b).standard_normal((b, 3, 224, 224)).astype(np.float32))
    np.save(os.path.join(out, "row.npy"), np.array([0], dtype=np.int64))
    np.save(os.path.join(out, "zero.npy"), np.array([0.0], dtype=np.float32))


def qdq(out):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Images(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(7)
            self.batches = iter([{"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(os.path.join(out, "resnet50.onnx"), os.path.join(out, "resnet50_qdq.onnx"),
                    Images(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def timed(fn, runs, sync):
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        sync()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000.0


def torch_timings(out):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    flops = 2 * SIZE ** 3
    a = torch.randn(SIZE, SIZE, device=dev) / math.sqrt(SIZE)
    b = torch.randn(SIZE, SIZE, device=dev) / math.sqrt(SIZE)
    for dtype, name in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")):
        x, y = a.to(dtype), b.to(dtype)
        us = timed(lambda: x @ y, 50, sync)
        print(json.dumps({"runner": "torch_cuda", "workload": f"gemm_4096_{name}", "median_us": us,
                          "tflops": flops / us / 1e6}), flush=True)
    model = resnet50().to(dev)
    with torch.no_grad():
        for bsz in (1, 8):
            host = torch.from_numpy(np.load(os.path.join(out, f"resnet50_x{bsz}.npy")))
            # End to end as VKML is timed: the input from the host, the logits back to it.
            us = timed(lambda: model(host.to(dev)).cpu(), 50, sync)
            print(json.dumps({"runner": "torch_cuda_eager", "workload": f"resnet50_b{bsz}",
                              "median_us": us}), flush=True)


if __name__ == "__main__":
    commands = {"make": make, "torch": torch_timings, "qdq": qdq}
    if len(sys.argv) != 3 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](sys.argv[2])
