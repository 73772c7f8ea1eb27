#!/usr/bin/env bash
# Runs on the GPU machine: runs armed ahead behind the GPU's gate (the default; device/vulkan/
# gate.rs) against VKML_ARM=0 (every run submitted when its inputs are ready), in alternating
# phases, so that an effect that outlives a process would show in the phase after it.
# BENCHMARKS.md has what it measured.
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
for phase in armed1 off1 armed2 off2; do
  arm=1; case $phase in off*) arm=0 ;; esac
  for n in 1 10 1000 10000; do
    r=3000; [ $n = 1000 ] && r=1000; [ $n = 10000 ] && r=200
    m=$(VKML_ARM=$arm VKML_FUSION=0 "$bin" run benches/models/add_chain_$n.onnx --input x=/tmp/x1.npy --device vulkan --repeat $r --output-dir /tmp/o 2>>"$out/err.log" | grep latency | med)
    printf '%s\tadd_chain_%s\tvulkan\t%s\n' $phase $n "$m" | tee -a "$out/arm.tsv"
  done
  m=$(VKML_ARM=$arm "$bin" run tests/fixtures/mnist_cnn/model.onnx --test-data tests/fixtures/mnist_cnn/test_data_set_0 --device vulkan --repeat 3000 --output-dir /tmp/o 2>>"$out/err.log" | grep latency | med)
  printf '%s\tmnist_cnn\tvulkan\t%s\n' $phase "$m" | tee -a "$out/arm.tsv"
done
