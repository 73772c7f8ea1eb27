#!/usr/bin/env python3
"""Side-by-side reference timings for VKML's benchmarks: onnxruntime on the CPU, and PyTorch on
CUDA (eager, and replayed as a CUDA graph) when torch and a CUDA device are there.

Every timing is end to end: a host (numpy) input in, the output copied back to the host. Each
runner is checked against onnxruntime's output before it is timed. Prints one JSON line per
runner and workload: {"runner", "workload", "median_us", ...}.

  bench_reference.py                          # add chains in benches/models + mnist_cnn
  bench_reference.py MODEL.onnx [--batch 8]   # one model; symbolic dims take --batch
  bench_reference.py MODEL.onnx --shape input=4,1,28,28
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def emit(runner, workload, times_ns, **extra):
    us = [t / 1000.0 for t in times_ns]
    q = statistics.quantiles(us, n=10) if len(us) >= 2 else [us[0]] * 9
    record = {"runner": runner, "workload": workload, "median_us": round(statistics.median(us), 3),
              "p10_us": round(q[0], 3), "p90_us": round(q[-1], 3), "runs": len(us)}
    record.update(extra)
    print(json.dumps(record), flush=True)


def measure(fn, warmup_s, min_runs, max_runs, budget_s):
    """Times `fn` after a warm-up: at least `min_runs`, then until `budget_s` or `max_runs`."""
    end = time.perf_counter() + warmup_s
    fn()
    while time.perf_counter() < end:
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return times


def input_shapes(model, batch, overrides):
    init_names = {t.name for t in model.graph.initializer}
    shapes = {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        if vi.name in overrides:
            shapes[vi.name] = overrides[vi.name]
            continue
        dims = []
        for d in vi.type.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else batch)
        shapes[vi.name] = dims
    return shapes


def make_feeds(model, shapes, seed=0):
    rng = np.random.default_rng(seed)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    feeds = {}
    for name, shape in shapes.items():
        dtype = onnx.helper.tensor_dtype_to_np_dtype(types[name])
        if dtype.kind != "f":
            raise SystemExit(f"input {name}: only float inputs are generated, not {dtype}")
        feeds[name] = rng.random(shape, dtype=np.float64).astype(dtype)
    return feeds


def ort_session(path, threads, optimised=True):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimised
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if threads:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def close(got, want):
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5)


def bench_ort(path, workload, feeds, reference, args):
    sess = ort_session(path, args.ort_threads)
    out = sess.run(None, feeds)[0]
    if not close(out, reference):
        log(f"{workload}: onnxruntime (optimised) disagrees with the unoptimised reference")
    times = measure(lambda: sess.run(None, feeds), args.warmup_s, args.min_runs, args.max_runs, args.budget_s)
    emit("onnxruntime-cpu", workload, times, version=ort.__version__)


def torch_available():
    """torch with a CUDA device, or None (said once)."""
    global _TORCH
    if _TORCH is None:
        try:
            import torch
        except ImportError:
            log("torch is not installed: no PyTorch timings")
            torch = False
        if torch and not torch.cuda.is_available():
            log("torch has no CUDA device: no PyTorch timings")
            torch = False
        _TORCH = torch
    return _TORCH


_TORCH = None


def torch_runners(model, workload, feeds, reference, args):
    torch = torch_available()
    if not torch:
        return
    import torch_models

    try:
        module = torch_models.from_onnx(model)
    except NotImplementedError as e:
        log(f"{workload}: no torch translation ({e}): no PyTorch timings")
        return
    # Plain fp32, as onnxruntime and VKML compute it, not TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    module = module.to(device)
    (x_np,) = feeds.values()
    x_host = torch.from_numpy(x_np)
    extra = {"version": torch.__version__, "device": torch.cuda.get_device_name(0)}

    @torch.inference_mode()
    def eager():
        return module(x_host.to(device)).cpu()

    if not close(eager().numpy(), reference):
        log(f"{workload}: torch eager disagrees with onnxruntime: not timed")
        return
    times = measure(eager, args.warmup_s, args.min_runs, args.max_runs, args.budget_s)
    emit("torch-cuda-eager", workload, times, **extra)

    with torch.inference_mode():
        static_in = x_host.to(device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                module(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = module(static_in)

    @torch.inference_mode()
    def replay():
        static_in.copy_(x_host)
        graph.replay()
        return static_out.cpu()

    if not close(replay().numpy(), reference):
        log(f"{workload}: torch CUDA graph disagrees with onnxruntime: not timed")
        return
    times = measure(replay, args.warmup_s, args.min_runs, args.max_runs, args.budget_s)
    emit("torch-cuda-graph", workload, times, **extra)


def workload_name(path, batch_given, batch):
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem == "model":
        stem = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return f"{stem}_b{batch}" if batch_given else stem


def bench_model(path, args, batch=None, workload=None):
    model = onnx.load(path)
    batch_given = args.batch is not None
    batch = batch or args.batch or 1
    shapes = input_shapes(model, batch, args.shape)
    if len(shapes) != 1:
        raise SystemExit(f"{path}: {len(shapes)} inputs; these runners take models with one input")
    feeds = make_feeds(model, shapes)
    workload = workload or args.workload or workload_name(path, batch_given, batch)
    log(f"{workload}: {path} with {shapes}")
    reference = ort_session(path, 1, optimised=False).run(None, feeds)[0]
    if "ort" in args.runners:
        bench_ort(path, workload, feeds, reference, args)
    if "torch" in args.runners:
        torch_runners(model, workload, feeds, reference, args)


def parse_shape(text):
    name, _, dims = text.rpartition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected NAME=d0,d1,...")
    return name, [int(d) for d in dims.split(",") if d]


def default_models():
    chains = glob.glob(os.path.join(REPO, "benches", "models", "add_chain_*.onnx"))
    chains.sort(key=lambda p: int(re.search(r"add_chain_(\d+)", p).group(1)))
    mnist = os.path.join(REPO, "tests", "fixtures", "mnist_cnn_dynamic", "model.onnx")
    return [(p, None, None) for p in chains] + [(mnist, 1, "mnist_cnn_b1"), (mnist, 64, "mnist_cnn_b64")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="ONNX models (default: the add chains and mnist_cnn)")
    p.add_argument("--shape", type=parse_shape, action="append", default=[],
                   help="input shape NAME=d0,d1,... (default: declared, symbolic dims = --batch)")
    p.add_argument("--batch", type=int, help="size of symbolic dimensions (default 1)")
    p.add_argument("--workload", help="workload name in the output (default: the model's name)")
    p.add_argument("--runners", default="ort,torch", help="comma-separated: ort, torch")
    p.add_argument("--warmup-s", type=float, default=0.5)
    p.add_argument("--min-runs", type=int, default=20)
    p.add_argument("--max-runs", type=int, default=2000)
    p.add_argument("--budget-s", type=float, default=2.0, help="timing time per runner and workload")
    p.add_argument("--ort-threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    args = p.parse_args()
    args.shape = dict(args.shape)
    args.runners = set(args.runners.split(","))
    if args.models:
        for path in args.models:
            bench_model(path, args)
    else:
        for path, batch, workload in default_models():
            bench_model(path, args, batch, workload)


if __name__ == "__main__":
    main()
