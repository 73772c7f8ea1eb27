#!/usr/bin/env bash
# Runs on the GPU machine (see BENCHMARKS.md): issue 20's cluster figures, loopback.
#   bash benches/cluster-gpu.sh scaling   # QUIC vs TCP round trips, then 1/2/3 pinned CPU nodes
#   bash benches/cluster-gpu.sh hops      # in process / 1 node / 3 nodes, CPU and Vulkan
# Uses the binaries benches/stage-gpu.sh staged in .gpu/. Logs under $OUT when set.
set -uo pipefail
what=${1:-scaling}
out=${OUT:-/tmp/vkml-cluster}
mkdir -p "$out"
# The fixtures' paths are compiled into the binaries as /work/main/tests/..., hence the link.
[ -e /work/main/tests/fixtures ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; } 2>/dev/null
export VKML_NODE_BIN=.gpu/vkml-node
nproc > "$out/nproc.txt"

case $what in
scaling)
  timeout 120 .gpu/bench-transport --bench > "$out/transport.txt" 2>&1
  # A compute-bound model: 12 blocks of [32, 2048] x [2048, 2048], 3.2 GFLOP and 201 MB of
  # weights a run; its input as the bench reads inputs (test_data_set_0/input_0.pb).
  m=/tmp/chain-scaling
  python3 benches/big/make_chain.py --out "$m" --blocks 12 --dim 2048 --batch 32 \
    --no-check > "$out/make_chain.txt" 2>&1
  python3 - "$m" <<'PY' >> "$out/make_chain.txt" 2>&1
import os, sys
import numpy as np
from onnx import numpy_helper
d = sys.argv[1]
os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
t = numpy_helper.from_array(np.load(os.path.join(d, "x.npy")), "x")
open(os.path.join(d, "test_data_set_0", "input_0.pb"), "wb").write(t.SerializeToString())
PY
  VKML_BENCH_SCALING="$m/chain.onnx" VKML_BENCH_CORES=${CORES:-5} VKML_BENCH_SECS=${SECS:-5} \
    timeout 420 .gpu/bench-cluster --bench > "$out/scaling.txt" 2>&1
  echo "== transport"; grep -iE "rtt|round|4 KiB|256 MiB" "$out/transport.txt" | head -12
  echo "== scaling"; tail -5 "$out/scaling.txt"
  ;;
hops)
  for d in cpu vulkan; do
    VKML_BENCH_DEVICE=$d VKML_BENCH_SECS=${SECS:-2} timeout 270 .gpu/bench-cluster --bench \
      > "$out/cluster_$d.txt" 2>&1
    echo "== $d"; tail -16 "$out/cluster_$d.txt"
  done
  ;;
*)
  echo "usage: $0 scaling|hops" >&2
  exit 2
  ;;
esac
