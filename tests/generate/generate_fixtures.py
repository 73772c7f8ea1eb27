#!/usr/bin/env python3
"""Regenerates tests/fixtures/ (and the benchmark models in benches/models/).

Needs onnx==1.22.0, onnxruntime and numpy (see tests/README.md). Every random value comes from a
numpy Generator seeded by the fixture's name, and onnxruntime runs unoptimised on one thread, so
a rerun rewrites identical bytes. References are onnxruntime's outputs, never ours.
"""

import argparse
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import models  # noqa: E402
import op_models  # noqa: E402
import llm_op_models  # noqa: E402,F401  (adds its fixtures to op_models')
import recurrent_op_models  # noqa: E402,F401  (likewise)
import control_op_models  # noqa: E402,F401  (likewise)

REPO = os.path.dirname(os.path.dirname(HERE))
# Past this, the fixture set stops being "small" and the repository starts to bloat.
FIXTURES_BUDGET = 3 * 1024 * 1024
GITATTRIBUTES = "# Generated binaries: never diffed or merged as text.\n*.onnx binary\n*.pb binary\n*.npy binary\n*.bin binary\n"


def write_gitattributes(folder):
    with open(os.path.join(folder, ".gitattributes"), "w") as f:
        f.write(GITATTRIBUTES)


def dir_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--fixtures", default=os.path.join(REPO, "tests", "fixtures"))
    p.add_argument("--bench-models", default=os.path.join(REPO, "benches", "models"))
    p.add_argument("--skip-bench-models", action="store_true")
    args = p.parse_args()

    if onnx.__version__ != "1.22.0":
        print(f"warning: onnx {onnx.__version__}, the committed fixtures were made with 1.22.0",
              file=sys.stderr)
    np.seterr(all="raise")

    # Start clean, so a fixture removed from the generator disappears from the tree.
    if os.path.isdir(args.fixtures):
        shutil.rmtree(args.fixtures)
    os.makedirs(args.fixtures)
    write_gitattributes(args.fixtures)

    models.gen_mnist(args.fixtures)
    models.gen_mlp(args.fixtures)
    models.gen_squeezenet(args.fixtures)
    models.gen_add_chain(args.fixtures)
    models.gen_elementwise_chain(args.fixtures)
    models.gen_output_names(args.fixtures)
    models.gen_external_data(args.fixtures)
    models.gen_chain_external(args.fixtures)
    models.gen_shape_input(args.fixtures)
    ops = op_models.gen_ops(args.fixtures)
    models.gen_malformed(args.fixtures)

    size = dir_size(args.fixtures)
    folders = [f for f in os.listdir(args.fixtures) if os.path.isdir(os.path.join(args.fixtures, f))]
    print(f"{len(ops)} op fixtures, {len(folders)} folders, {size / 1024:.0f} KiB "
          f"in {os.path.relpath(args.fixtures, REPO)}")
    if size > FIXTURES_BUDGET:
        raise SystemExit(f"fixtures take {size} bytes, over the {FIXTURES_BUDGET} budget")

    if not args.skip_bench_models:
        models.gen_bench_models(args.bench_models)
        write_gitattributes(args.bench_models)
        print(f"benchmark models in {os.path.relpath(args.bench_models, REPO)}: "
              + ", ".join(f"{f} {os.path.getsize(os.path.join(args.bench_models, f)) // 1024} KiB"
                          for f in sorted(os.listdir(args.bench_models)) if f.endswith(".onnx")))


if __name__ == "__main__":
    main()
