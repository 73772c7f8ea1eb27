#!/usr/bin/env bash
# Runs on the GPU machine (see BENCHMARKS.md): issue 20's cluster figures, loopback.
#   bash benches/cluster-gpu.sh scaling   # QUIC vs TCP round trips, then 1/2/3 pinned CPU nodes
#   bash benches/cluster-gpu.sh hops      # in process / 1 node / 3 nodes, CPU and Vulkan
#   bash benches/cluster-gpu.sh all       # both
# The scaling model: BLOCKS blocks of [BATCH, DIM] x [DIM, DIM] (default 8, 256, 1024: 4.3
# GFLOP a run, so compute, not streaming the weights, sets the pace), CORES per node (5),
# DEVICE the nodes' --device (cpu; vulkan:{i} gives node i GPU i, on a machine with three).
# Uses the binaries benches/stage-gpu.sh staged in .gpu/. Logs under $OUT when set.
set -uo pipefail
what=${1:-scaling}
out=${OUT:-/tmp/vkml-cluster}
mkdir -p "$out"
# The fixtures' paths are compiled into the binaries as /work/main/tests/..., hence the link.
[ -e /work/main/tests/fixtures ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; } 2>/dev/null
export VKML_NODE_BIN=.gpu/vkml-node
nproc > "$out/nproc.txt"

scaling() {
  timeout 120 .gpu/bench-transport --bench > "$out/transport.txt" 2>&1
  # The model, and its input as the bench reads inputs (test_data_set_0/input_0.pb).
  m=/tmp/chain-scaling-${BLOCKS:-8}-${DIM:-1024}-${BATCH:-256}
  python3 benches/big/make_chain.py --out "$m" --blocks "${BLOCKS:-8}" --dim "${DIM:-1024}" \
    --batch "${BATCH:-256}" --no-check > "$out/make_chain.txt" 2>&1
  # NODE_LOGS=1: the nodes' trace logs (a run's life hop by hop), their first 3000 lines each.
  logs=""
  if [ -n "${NODE_LOGS:-}" ]; then logs=$out/logs; mkdir -p "$logs"; fi
  VKML_BENCH_SCALING="$m/chain.onnx" VKML_BENCH_CORES=${CORES:-5} VKML_BENCH_SECS=${SECS:-5} \
    VKML_BENCH_DEVICE=${DEVICE:-cpu} VKML_BENCH_GAP_MS=${GAP_MS:-} VKML_BENCH_NODE_LOGS=$logs \
    VKML_BENCH_CAP_EXTRA=${CAP_EXTRA:-15} \
    timeout 420 .gpu/bench-cluster --bench > "$out/scaling.txt" 2>&1
  if [ -n "$logs" ]; then
    for f in "$logs"/*.log; do head -n 3000 "$f" > "$f.head"; rm "$f"; done
  fi
  echo "== transport"; tail -4 "$out/transport.txt"
  echo "== scaling"; head -1 "$out/make_chain.txt"; grep "pause" "$out/scaling.txt"; tail -5 "$out/scaling.txt"
}

hops() {
  for d in cpu vulkan; do
    VKML_BENCH_DEVICE=$d VKML_BENCH_SECS=${HOP_SECS:-2} timeout 270 .gpu/bench-cluster --bench \
      > "$out/cluster_$d.txt" 2>&1
    echo "== $d"; tail -16 "$out/cluster_$d.txt"
  done
}

case $what in
scaling) scaling ;;
hops) hops ;;
all) scaling; hops ;;
*)
  echo "usage: $0 scaling|hops" >&2
  exit 2
  ;;
esac
