#!/usr/bin/env bash
# Runs on the GPU machine: armed runs (VKML_ARM=1, device/vulkan/lanes.rs) against the default,
# in phases default, default, armed, default, so that an effect that outlives a process would
# show in the last phase; then peak host memory by number of lanes open. BENCHMARKS.md,
# session 6, has what it measured on an H100.
# Usage: benches/arm-ab.sh [VKML_BINARY]   (default .gpu/vkml-node). Logs under $OUT when set.
set -uo pipefail
bin=${1:-.gpu/vkml-node}
out=${OUT:-/tmp/vkml-arm}
mkdir -p "$out"
python3 -c "import numpy as np; np.save('/tmp/x1.npy', np.array([0.5], dtype=np.float32))"
med() { sed -n 's/.*median \([0-9.]*\) us.*/\1/p'; }
# Clocks up first: an idle GPU takes seconds to reach them.
VKML_FUSION=0 "$bin" run benches/models/add_chain_10000.onnx --input x=/tmp/x1.npy --device vulkan --repeat 200 --output-dir /tmp/o >/dev/null 2>&1
printf 'phase\tworkload\tdevice\tmedian_us\n' > "$out/arm.tsv"
for phase in default1 default2 armed default3; do
  arm=0; [ $phase = armed ] && arm=1
  for n in 1 10 1000 10000; do
    r=3000; [ $n = 1000 ] && r=1000; [ $n = 10000 ] && r=200
    m=$(VKML_ARM=$arm VKML_FUSION=0 "$bin" run benches/models/add_chain_$n.onnx --input x=/tmp/x1.npy --device vulkan --repeat $r --output-dir /tmp/o 2>>"$out/err.log" | grep latency | med)
    printf '%s\tadd_chain_%s\tvulkan\t%s\n' $phase $n "$m" | tee -a "$out/arm.tsv"
  done
  m=$(VKML_ARM=$arm "$bin" run tests/fixtures/mnist_cnn/model.onnx --test-data tests/fixtures/mnist_cnn/test_data_set_0 --device vulkan --repeat 3000 --output-dir /tmp/o 2>>"$out/err.log" | grep latency | med)
  printf '%s\tmnist_cnn\tvulkan\t%s\n' $phase "$m" | tee -a "$out/arm.tsv"
done
# Peak RSS of `devices` (the driver alone) by lanes open (VKML_LANES applies with VKML_ARM=1).
python3 - "$bin" <<'PY' | tee -a "$out/arm.tsv"
import os, subprocess, sys
def peak(args, env):
    r = subprocess.run([sys.executable, "-c",
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)", *args],
        check=True, capture_output=True, text=True, env={**os.environ, **env})
    return int(r.stdout) / 1024
for lanes in ["0", "2", "8"]:
    print(f"peak_rss_devices_lanes{lanes}\tvulkan\t{peak([sys.argv[1], 'devices'], {'VKML_ARM': '1', 'VKML_LANES': lanes}):.1f} MiB")
PY
