#!/usr/bin/env python3
"""Make a large ONNX model whose weights live in external-data files, made at benchmark time
(too big to commit).

The model is a chain of N blocks, each y = Relu(MatMul(x, W_i) + b_i), W_i [D, D], b_i [D],
input x [B, D], output y [B, D]. It exists to test and measure how VKML handles models larger
than one node's memory (issue 19): weights split over nodes, streamed from external data,
cached by participants. The chain depends on the input x, so the planner cannot fold it away.

Weights are seeded random normals scaled by sqrt(2/D) (Relu halves the energy, the scale
doubles it back), biases small, so activations stay O(1) after thousands of blocks.

The weights are written streaming, block by block (generate, append, free), so a 40 GB model
is made in the memory of one block; the graph refers to them by hand-set external_data
entries (location, offset, length), never through onnx's helpers that load every tensor.

  make_chain.py --out DIR --bytes 1.2e9            # ~1.2 GB of f32 weights, D=4096
  make_chain.py --out DIR --blocks 8 --dim 1024 --reference
  make_chain.py --out DIR --bytes 4e10 --files-per-block --dtype float16
  make_chain.py --selfcheck                         # small models: onnx.checker + onnxruntime
                                                    # against the float64 reference

DIR gets chain.onnx, its weight file(s) (chain.onnx.data, or chain.block<i>.bin with
--files-per-block), x.npy (seeded input, also as test_data_set_0/input_0.pb), ref.npy with --reference (the output computed in
float64 with numpy, block by block from the weight files through np.memmap, so memory stays
one block), and meta.json (dims, dtype, blocks, weight bytes: read by big_submit.py).
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np

MODEL = "chain.onnx"
ONE_FILE = "chain.onnx.data"


def block_file(i):
    return f"chain.block{i:05d}.bin"


def block_weights(seed, i, dim, dtype):
    """Block i's (W, b), seeded by (seed, i) so any block can be made alone."""
    rng = np.random.default_rng([seed, i])
    w = rng.standard_normal((dim, dim), dtype=np.float32)
    w *= np.float32(math.sqrt(2.0 / dim))
    b = rng.standard_normal(dim, dtype=np.float32)
    b *= np.float32(0.01)
    return w.astype(dtype, copy=False), b.astype(dtype, copy=False)


def make_input(seed, batch, dim, dtype):
    rng = np.random.default_rng([seed, 1 << 30])
    return rng.standard_normal((batch, dim), dtype=np.float32).astype(dtype)


def blocks_for_bytes(nbytes, dim, dtype):
    per_block = (dim * dim + dim) * np.dtype(dtype).itemsize
    return max(1, int(round(nbytes / per_block)))


def write_weights(out, blocks, dim, dtype, seed, files_per_block, align):
    """Stream every block's W and b into the side file(s); returns [(name, file, offset,
    length, dims)] for the graph's initializers. Holds one block at a time."""
    entries = []
    f = None
    try:
        for i in range(blocks):
            if files_per_block or f is None:
                if f is not None:
                    f.close()
                fname = block_file(i) if files_per_block else ONE_FILE
                f = open(os.path.join(out, fname), "wb")
            w, b = block_weights(seed, i, dim, dtype)
            for name, arr in ((f"W{i}", w), (f"b{i}", b)):
                pos = f.tell()
                pad = (-pos) % align
                if pad:
                    f.write(b"\0" * pad)
                    pos += pad
                f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
                entries.append((name, fname, pos, arr.nbytes, list(arr.shape)))
            del w, b
    finally:
        if f is not None:
            f.close()
    return entries


def build_graph(entries, blocks, batch, dim, dtype):
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = []
    for name, fname, offset, length, dims in entries:
        t = TensorProto()
        t.name = name
        t.data_type = elem
        t.dims.extend(dims)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", fname), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key = k
            e.value = v
        inits.append(t)
    nodes = []
    cur = "x"
    for i in range(blocks):
        out = "y" if i == blocks - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [cur, f"W{i}"], [f"m{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"))
        nodes.append(helper.make_node("Relu", [f"a{i}"], [out], name=f"relu{i}"))
        cur = out
    graph = helper.make_graph(
        nodes,
        f"chain_{blocks}x{dim}",
        [helper.make_tensor_value_info("x", elem, [batch, dim])],
        [helper.make_tensor_value_info("y", elem, [batch, dim])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="make_chain.py"
    )
    model.ir_version = 8
    return model


def reference(out, entries, x, dtype):
    """The chain in float64, one block at a time, weights read back through np.memmap."""
    by_name = {e[0]: e for e in entries}
    h = x.astype(np.float64)
    i = 0
    while f"W{i}" in by_name:
        arrs = []
        for name in (f"W{i}", f"b{i}"):
            _, fname, offset, length, dims = by_name[name]
            m = np.memmap(os.path.join(out, fname), dtype=dtype, mode="r", offset=offset,
                          shape=tuple(dims))
            arrs.append(m)
        w, b = arrs
        h = np.maximum(h @ w.astype(np.float64) + b.astype(np.float64), 0.0)
        del w, b, arrs
        i += 1
    return h


def make(out, blocks, dim, batch, dtype, seed, files_per_block, with_ref, align=4096,
         check=True, quiet=False):
    say = (lambda *a: None) if quiet else print
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    entries = write_weights(out, blocks, dim, dtype, seed, files_per_block, align)
    t_weights = time.time() - t0
    model = build_graph(entries, blocks, batch, dim, dtype)
    model_path = os.path.join(out, MODEL)
    with open(model_path, "wb") as f:
        f.write(model.SerializeToString())
    x = make_input(seed, batch, dim, dtype)
    np.save(os.path.join(out, "x.npy"), x)
    # The same input in ONNX's test-data layout, which `vkml-node run --test-data` and the
    # benches read.
    from onnx import numpy_helper
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(out, "test_data_set_0", "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    weight_bytes = sum(e[3] for e in entries)
    files = sorted({e[1] for e in entries})
    file_bytes = sum(os.path.getsize(os.path.join(out, f)) for f in files)
    say(f"{model_path}: {blocks} blocks of [{dim},{dim}] {np.dtype(dtype).name}, batch {batch}; "
        f"weights {weight_bytes / 1e9:.3f} GB in {len(files)} file(s) ({file_bytes / 1e9:.3f} GB "
        f"on disk), graph {os.path.getsize(model_path)} B; written in {t_weights:.1f} s "
        f"({file_bytes / 1e6 / max(t_weights, 1e-9):.0f} MB/s)")
    if check:
        import onnx

        t = time.time()
        onnx.checker.check_model(model_path)
        say(f"onnx.checker: ok ({time.time() - t:.1f} s)")
    ref_path = None
    if with_ref:
        t = time.time()
        ref = reference(out, entries, x, dtype)
        ref_path = os.path.join(out, "ref.npy")
        np.save(ref_path, ref)
        say(f"ref.npy: float64 reference in {time.time() - t:.1f} s, "
            f"max|y| {np.abs(ref).max():.4g}, rms {np.sqrt(np.mean(ref ** 2)):.4g}")
    meta = {
        "model": MODEL,
        "files": files,
        "blocks": blocks,
        "dim": dim,
        "batch": batch,
        "dtype": np.dtype(dtype).name,
        "seed": seed,
        "weight_bytes": weight_bytes,
        "file_bytes": file_bytes,
        "input": "x",
        "output": "y",
        "reference": ref_path is not None,
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def selfcheck():
    """Small instances: onnx.checker with the external data, onnxruntime against the
    float64 reference."""
    import onnxruntime as ort

    ok = True
    cases = [
        ("one file, f32", dict(blocks=6, dim=256, batch=1, dtype=np.float32,
                               files_per_block=False), 1e-4),
        ("file per block, f32, batch 3", dict(blocks=6, dim=256, batch=3, dtype=np.float32,
                                              files_per_block=True), 1e-4),
        ("one file, f16", dict(blocks=6, dim=256, batch=1, dtype=np.float16,
                               files_per_block=False), 2e-2),
        ("by bytes, 40 blocks", dict(blocks=blocks_for_bytes(40 * (128 * 128 + 128) * 4, 128, np.float32),
                                     dim=128, batch=2, dtype=np.float32,
                                     files_per_block=False), 1e-4),
    ]
    for label, kw, tol in cases:
        d = tempfile.mkdtemp(prefix="big-selfcheck-")
        try:
            meta = make(d, seed=7, with_ref=True, quiet=True, **kw)
            sess = ort.InferenceSession(os.path.join(d, MODEL), providers=["CPUExecutionProvider"])
            x = np.load(os.path.join(d, "x.npy"))
            (y,) = sess.run(["y"], {"x": x})
            ref = np.load(os.path.join(d, "ref.npy"))
            err = rel_err(y, ref)
            scale = np.sqrt(np.mean(ref ** 2))
            good = err <= tol and y.shape == ref.shape and 0.05 < scale < 20
            ok &= good
            print(f"{'ok  ' if good else 'FAIL'} {label}: {meta['blocks']} blocks, "
                  f"{len(meta['files'])} file(s), rel err {err:.2e} (tol {tol:g}), rms {scale:.3g}")
        finally:
            shutil.rmtree(d, ignore_errors=True)
    # Same seed, same bytes: a model can be remade identically.
    d1, d2 = (tempfile.mkdtemp(prefix="big-selfcheck-") for _ in range(2))
    try:
        for d in (d1, d2):
            make(d, blocks=3, dim=64, batch=1, dtype=np.float32, seed=3, files_per_block=False,
                 with_ref=False, check=False, quiet=True)
        same = all(open(os.path.join(d1, f), "rb").read() == open(os.path.join(d2, f), "rb").read()
                   for f in (MODEL, ONE_FILE, "x.npy"))
        ok &= same
        print(f"{'ok  ' if same else 'FAIL'} deterministic: same seed, same files")
    finally:
        shutil.rmtree(d1, ignore_errors=True)
        shutil.rmtree(d2, ignore_errors=True)
    print("selfcheck:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="output folder (created)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--blocks", type=int, help="number of blocks")
    size.add_argument("--bytes", type=float, help="total weight bytes to reach (about), e.g. 1.2e9")
    p.add_argument("--dim", type=int, default=4096, help="D (default 4096)")
    p.add_argument("--batch", type=int, default=1, help="B, rows of x (default 1)")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--files-per-block", action="store_true",
                   help="one weight file per block instead of one for the whole model")
    p.add_argument("--align", type=int, default=4096, help="align each tensor's offset (default 4096)")
    p.add_argument("--reference", action="store_true", help="also write ref.npy (float64 reference)")
    p.add_argument("--no-check", action="store_true", help="skip onnx.checker")
    p.add_argument("--selfcheck", action="store_true",
                   help="make small models and check them with onnx.checker and onnxruntime")
    a = p.parse_args()
    if a.selfcheck:
        return selfcheck()
    if not a.out:
        p.error("--out is required (or --selfcheck)")
    dtype = np.dtype(a.dtype).type
    if a.blocks is not None:
        blocks = a.blocks
    elif a.bytes is not None:
        blocks = blocks_for_bytes(a.bytes, a.dim, dtype)
    else:
        p.error("give --blocks or --bytes")
    if blocks < 1 or a.dim < 1 or a.batch < 1 or a.align < 1:
        p.error("blocks, dim, batch and align must be positive")
    t0 = time.time()
    make(a.out, blocks, a.dim, a.batch, dtype, a.seed, a.files_per_block, a.reference,
         align=a.align, check=not a.no_check)
    print(f"done in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
