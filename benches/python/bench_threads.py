"""Runs/s and CPU time a run of one CPU InferenceSession called from several Python threads at
once (BENCHMARKS.md, session 26: the CPU products' threads).

    target/py-venv/bin/python benches/python/bench_threads.py MODEL.onnx INPUT.npy [--threads 4] [--secs 6]
"""

import argparse
import resource
import threading
import time

import numpy as np

import vkml


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("input", help="the model's one input, as .npy")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--secs", type=float, default=6.0)
    args = ap.parse_args()
    x = np.load(args.input)
    sess = vkml.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    feeds = {sess.get_inputs()[0].name: x}
    for _ in range(3):  # planned, caches warm
        sess.run(None, feeds)
    stop = time.perf_counter() + args.secs
    counts = [0] * args.threads

    def work(i):
        while time.perf_counter() < stop:
            sess.run(None, feeds)
            counts[i] += 1

    before = resource.getrusage(resource.RUSAGE_SELF)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(args.threads)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    runs = sum(counts)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{args.threads} threads: {runs / elapsed:.1f} runs/s, {cpu / runs * 1e3:.1f} ms of CPU a run")


if __name__ == "__main__":
    main()
