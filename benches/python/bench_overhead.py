"""What a call through the Python package adds to a run of the Rust API (issue 22's target:
at most 10 us for the MNIST-like CNN). Both are timed in one process, in alternating rounds:
`InferenceSession.run` from Python (numpy in, numpy out), and the Rust API run in a loop
inside the extension (`_time_runs`, the GIL released). Both arm each run behind the GPU's
gate, the default; a second session with the config entry `vkml.arm` = 0 times both unarmed
too. Prints medians and the Python call's difference to the Rust API per provider.

    target/py-venv/bin/python benches/python/bench_overhead.py [--runs N] [--rounds R]

(scripts/python-tests.sh makes target/py-venv with the package installed.) Where the onnx
package is missing (the GPU machine), `--input x.npy` gives the input, saved with numpy from
tests/fixtures/mnist_cnn/test_data_set_0/input_0.pb."""

import argparse
import pathlib
import statistics
import time

import numpy as np

import vkml

REPO = pathlib.Path(__file__).resolve().parents[2]
MNIST = REPO / "tests" / "fixtures" / "mnist_cnn"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000, help="runs a round (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    ap.add_argument("--input", help="the input as a .npy file (default: the fixture's .pb)")
    ap.add_argument("--gaps", help="also time the Rust loop with the host idle this many us "
                    "before each run, e.g. 0,2,5,10,20,50 (a run's time against the pause "
                    "before it)")
    args = ap.parse_args()
    if args.input:
        x = np.load(args.input)
    else:
        from onnx import TensorProto, numpy_helper

        t = TensorProto()
        t.ParseFromString((MNIST / "test_data_set_0" / "input_0.pb").read_bytes())
        x = numpy_helper.to_array(t)
    print(f"vkml {vkml.__version__}, MNIST-like CNN, {args.rounds} rounds of {args.runs} runs")
    # Two steps between the Rust loop and the full call, to tell where the time goes: one
    # Rust run per Python call of the extension (the input converted and the GIL released
    # each time, no output made), and the extension's run itself (outputs as numpy arrays,
    # without InferenceSession's Python layer).
    print(f"{'provider':<26} {'Rust API':>9} {'one run':>8} {'ext run':>8} {'Python':>8} "
          f"{'added':>6} {'unarmed: Rust':>14} {'Python':>7}   (medians, us)")
    for provider in vkml.get_available_providers():
        sess = vkml.InferenceSession(str(MNIST / "model.onnx"), providers=[provider])
        so = vkml.SessionOptions()
        so.add_session_config_entry("vkml.arm", "0")
        unarmed = vkml.InferenceSession(str(MNIST / "model.onnx"), sess_options=so,
                                        providers=[provider])
        name = sess.get_inputs()[0].name
        feeds = {name: x}
        pairs = [(name, x)]
        for _ in range(200):  # planned and recorded, caches warm
            sess.run(None, feeds)
            unarmed.run(None, feeds)
        times = {"rust": [], "one": [], "ext": [], "python": [], "rust0": [], "python0": []}
        calls = {
            "one": lambda: sess._sess._time_runs(pairs, 1),
            "ext": lambda: sess._sess.run(None, pairs),
            "python": lambda: sess.run(None, feeds),
            "python0": lambda: unarmed.run(None, feeds),
        }
        for _ in range(args.rounds):
            times["rust"] += sess._sess._time_runs(pairs, args.runs)
            times["rust0"] += unarmed._sess._time_runs(pairs, args.runs)
            for key, call in calls.items():
                for _ in range(args.runs):
                    start = time.perf_counter()
                    call()
                    times[key].append(time.perf_counter() - start)
        m = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        print(f"{provider:<26} {m['rust']:>9.1f} {m['one']:>8.1f} {m['ext']:>8.1f} "
              f"{m['python']:>8.1f} {m['python'] - m['rust']:>6.1f} {m['rust0']:>14.1f} "
              f"{m['python0']:>7.1f}")
        if args.gaps:
            gaps = [float(g) for g in args.gaps.split(",")]
            by_gap = {g: [] for g in gaps}
            for _ in range(args.rounds):
                for g in gaps:
                    by_gap[g] += sess._sess._time_runs(pairs, args.runs, g)
            cells = " ".join(f"{g:g}us:{statistics.median(v) * 1e6:.1f}"
                             for g, v in by_gap.items())
            print(f"{'':<26} run after a pause (medians, us): {cells}")


if __name__ == "__main__":
    main()
