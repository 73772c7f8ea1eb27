"""What a call through the Python package adds to a run of the Rust API (issue 22's target:
at most 10 us for the MNIST-like CNN). Both are timed in one process, in alternating rounds:
`InferenceSession.run` from Python (numpy in, numpy out), and the same session's Rust API run
in a loop inside the extension (`_time_runs`, the GIL released). Prints medians and their
difference per provider.

    target/py-venv/bin/python benches/python/bench_overhead.py [--runs N] [--rounds R]

(scripts/python-tests.sh makes target/py-venv with the package installed.)"""

import argparse
import pathlib
import statistics
import time

import numpy as np
from onnx import TensorProto, numpy_helper

import vkml

REPO = pathlib.Path(__file__).resolve().parents[2]
MNIST = REPO / "tests" / "fixtures" / "mnist_cnn"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000, help="runs a round (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    args = ap.parse_args()
    t = TensorProto()
    t.ParseFromString((MNIST / "test_data_set_0" / "input_0.pb").read_bytes())
    x = numpy_helper.to_array(t)
    print(f"vkml {vkml.__version__}, MNIST-like CNN, {args.rounds} rounds of {args.runs} runs")
    print(f"{'provider':<26} {'Rust API us':>12} {'Python us':>10} {'added us':>9}")
    for provider in vkml.get_available_providers():
        sess = vkml.InferenceSession(str(MNIST / "model.onnx"), providers=[provider])
        name = sess.get_inputs()[0].name
        feeds = {name: x}
        for _ in range(200):  # planned and recorded, caches warm
            sess.run(None, feeds)
        rust, python = [], []
        for _ in range(args.rounds):
            rust += sess._sess._time_runs([(name, x)], args.runs)
            for _ in range(args.runs):
                start = time.perf_counter()
                sess.run(None, feeds)
                python.append(time.perf_counter() - start)
        r, p = statistics.median(rust) * 1e6, statistics.median(python) * 1e6
        print(f"{provider:<26} {r:>12.1f} {p:>10.1f} {p - r:>9.1f}")


if __name__ == "__main__":
    main()
