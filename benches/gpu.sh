#!/usr/bin/env bash
# Runs on the GPU machine (see BENCHMARKS.md): VKML on Vulkan and on its CPU backend, and the
# reference runtimes (onnxruntime CPU, PyTorch CUDA eager and graphs), in one run.
# Usage: benches/gpu.sh [VKML_BINARY]   (default .gpu/vkml-node). Logs under $OUT when set.
set -uo pipefail
bin=${1:-.gpu/vkml-node}
out=${OUT:-/tmp/vkml-bench}
mkdir -p "$out"
repeat() { case $1 in *10000*) echo 300 ;; *1000*) echo 1000 ;; *) echo 3000 ;; esac; }
"$bin" devices | tee "$out/devices.txt"
printf 'model\tdevice\tmedian_us\n' > "$out/vkml.tsv"
python3 - > "$out/input.npy.ok" <<'PY'
import numpy as np
np.save("/tmp/x1.npy", np.array([0.5], dtype=np.float32))
PY
for n in 1 10 100 1000 10000; do
  for dev in vulkan cpu; do
    m=benches/models/add_chain_$n.onnx
    line=$("$bin" run "$m" --input x=/tmp/x1.npy --device $dev --repeat "$(repeat $n)" --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency)
    med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
    printf 'add_chain_%s\t%s\t%s\n' "$n" "$dev" "$med" | tee -a "$out/vkml.tsv"
  done
done
for dev in vulkan cpu auto; do
  line=$("$bin" run tests/fixtures/mnist_cnn/model.onnx --test-data tests/fixtures/mnist_cnn/test_data_set_0 --device $dev --repeat 3000 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency)
  med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
  printf 'mnist_cnn\t%s\t%s\n' "$dev" "$med" | tee -a "$out/vkml.tsv"
done
PYTHONUNBUFFERED=1 python3 benches/python/bench_reference.py > "$out/reference.jsonl" 2> "$out/reference.log"
echo "== reference runtimes"
python3 - "$out/reference.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    print(f"{r['workload']}\t{r['runner']}\t{r['median_us']:.1f}")
PY
echo "== vkml"
cat "$out/vkml.tsv"
