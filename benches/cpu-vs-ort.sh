#!/usr/bin/env bash
# Issue 24: VKML's CPU backend against onnxruntime's CPU provider on the same inputs, in one run:
# each exported model's median latency over REPEAT runs (1000), batch 1, onnxruntime with 1 and
# with THREADS intra-op threads (2). Needs a Python with onnx and onnxruntime (PYTHON, default
# python3) and a release vkml-node (BIN, default target/release/vkml-node).
# Usage: benches/cpu-vs-ort.sh [MODEL ...]   (names in tests/models; default three CNNs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${BIN:-target/release/vkml-node}
py=${PYTHON:-python3}
repeat=${REPEAT:-1000}
threads=${THREADS:-2}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(resnet_static mobilenetv2_static yolo_static)
printf '%-22s %10s %10s %10s %8s\n' model "vkml us" "ort1 us" "ort${threads} us" "ratio"
for m in "${models[@]}"; do
  d=tests/models/$m
  v=$("$bin" run "$d/model.onnx" --test-data "$d/test_data_set_0" --device cpu --repeat "$repeat" \
    --output-dir /tmp/cpu-vs-ort 2>/dev/null | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
  read -r o1 on < <("$py" - "$d" "$repeat" "$threads" <<'PY'
import glob, sys, time
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
d, repeat, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
inputs = [numpy_helper.to_array(onnx.load_tensor(f))
          for f in sorted(glob.glob(d + "/test_data_set_0/input_*.pb"))]
medians = []
for n in (1, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = n
    s = ort.InferenceSession(d + "/model.onnx", so, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(s.get_inputs(), inputs)}
    for _ in range(50):
        s.run(None, feed)
    t = []
    for _ in range(repeat):
        a = time.perf_counter()
        s.run(None, feed)
        t.append((time.perf_counter() - a) * 1e6)
    medians.append(np.median(t))
print(f"{medians[0]:.1f} {medians[1]:.1f}")
PY
)
  best=$(awk -v a="$o1" -v b="$on" 'BEGIN { print (a < b ? a : b) }')
  printf '%-22s %10s %10s %10s %8s\n' "$m" "$v" "$o1" "$on" "$(awk -v v="$v" -v b="$best" 'BEGIN { printf "%.2fx", v / b }')"
done
