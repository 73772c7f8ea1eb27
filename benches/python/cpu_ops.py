"""Single CPU ops beside onnxruntime (issue 24): where a model's time goes, one shape at a time.

    python3 benches/python/cpu_ops.py [--bin target/release/vkml-node] [--repeat 300] [CASE ...]

Each case is a one-node model (Conv, depthwise Conv or MaxPool, f32, batch 1) with random
weights and input, written to --dir (default /tmp/cpu-ops). VKML runs it through
`vkml-node run --device cpu --repeat N` (the median it prints), onnxruntime's CPU provider
(default settings, all cores) through a session timed around `run` the same N times after 30
warm-up runs; both end to end on the same input. VKML's output is checked against
onnxruntime's (rtol and atol 1e-3) and a mismatch is printed in the row. The shapes are the
layer classes of the models in benches/cpu-table.sh: depthwise (MobileNetV2), max pools
(SqueezeNet, ResNet, YOLO's SPPF), the first layers on three channels, pointwise and 3x3
layers. Needs numpy, onnx and onnxruntime.
"""

import argparse
import os
import re
import subprocess
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def model(name, node, c, hw, inits):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph([node], name, [x], [y], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    # Older onnxruntime builds refuse the newest IR versions that onnx writes by default.
    m.ir_version = min(m.ir_version, 10)
    return name, m, (1, c, hw, hw)


def conv(name, c, hw, oc, k, s, p, g=1):
    w = numpy_helper.from_array(RNG.standard_normal((oc, c // g, k, k)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(oc).astype(np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[s, s], pads=[p] * 4,
                            group=g, kernel_shape=[k, k])
    return model(name, node, c, hw, [w, b])


def max_pool(name, c, hw, k, s, p, ceil):
    node = helper.make_node("MaxPool", ["x"], ["y"], strides=[s, s], pads=[p] * 4,
                            kernel_shape=[k, k], ceil_mode=ceil)
    return model(name, node, c, hw, [])


CASES = [
    conv("dw3_s2_96x112", 96, 112, 96, 3, 2, 1, 96),
    conv("dw3_s1_144x56", 144, 56, 144, 3, 1, 1, 144),
    conv("dw3_s1_32x112", 32, 112, 32, 3, 1, 1, 32),
    max_pool("mp3_s2_64x111_ceil", 64, 111, 3, 2, 0, 1),
    max_pool("mp3_s2p1_64x112", 64, 112, 3, 2, 1, 0),
    max_pool("mp5_s1p2_128x10", 128, 10, 5, 1, 2, 0),
    conv("c3_first_sq", 3, 224, 64, 3, 2, 0),
    conv("c3_first_yolo", 3, 320, 16, 3, 2, 1),
    conv("c7_first_db", 3, 160, 64, 7, 2, 3),
    conv("pw_16to64_55", 16, 55, 64, 1, 1, 0),
    conv("pw_64to256_13", 64, 13, 256, 1, 1, 0),
    conv("pw_16to96_112", 16, 112, 96, 1, 1, 0),
    conv("pw_16to32_16", 16, 16, 32, 1, 1, 0),
    conv("pw_32to64_16", 32, 16, 64, 1, 1, 0),
    conv("pw_64to64_32", 64, 32, 64, 1, 1, 0),
    conv("pw_8to16_8", 8, 8, 16, 1, 1, 0),
    conv("c3_16x80_16", 16, 80, 16, 3, 1, 1),
    conv("c3_64x40_64", 64, 40, 64, 3, 1, 1),
    conv("c3_256x40_64", 256, 40, 64, 3, 1, 1),
    conv("c3_512x5_512", 512, 5, 512, 3, 1, 1),
]


def vkml_median(binary, path, feed, repeat, out_dir):
    run = subprocess.run([binary, "run", path, "--device", "cpu", "--input", f"x={feed}",
                          "--repeat", str(repeat), "--output-dir", out_dir],
                         capture_output=True, text=True)
    found = re.search(r"median ([0-9.]+) us", run.stdout + run.stderr)
    if not found:
        raise SystemExit(f"vkml-node failed on {path}:\n{run.stderr}")
    return float(found.group(1)), np.load(os.path.join(out_dir, "y.npy"))


def ort_median(path, x, repeat):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for _ in range(30):
        y = session.run(None, {"x": x})[0]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, {"x": x})
        times.append((time.perf_counter() - start) * 1e6)
    return float(np.median(times)), y


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default="target/release/vkml-node")
    p.add_argument("--repeat", type=int, default=300)
    p.add_argument("--dir", default="/tmp/cpu-ops")
    p.add_argument("cases", nargs="*", help="case names (default: all)")
    args = p.parse_args()
    unknown = set(args.cases) - {name for name, _, _ in CASES}
    if unknown:
        p.error(f"unknown cases {sorted(unknown)}; known: {[n for n, _, _ in CASES]}")
    out_dir = os.path.join(args.dir, "out")
    os.makedirs(out_dir, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} cores, repeat {args.repeat}")
    print(f"{'case':22s} {'vkml us':>9s} {'ort us':>9s} {'ratio':>6s}")
    for name, m, shape in CASES:
        if args.cases and name not in args.cases:
            continue
        path = os.path.join(args.dir, f"{name}.onnx")
        feed = os.path.join(args.dir, f"{name}_x.npy")
        onnx.save(m, path)
        x = RNG.standard_normal(shape).astype(np.float32)
        np.save(feed, x)
        v, y = vkml_median(args.bin, path, feed, args.repeat, out_dir)
        o, ref = ort_median(path, x, args.repeat)
        check = "ok" if np.allclose(y, ref, rtol=1e-3, atol=1e-3) else "MISMATCH"
        print(f"{name:22s} {v:9.1f} {o:9.1f} {v / o:6.2f} {check}", flush=True)


if __name__ == "__main__":
    main()
