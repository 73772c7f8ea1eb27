#!/usr/bin/env bash
# Issue 19's GPU target on the GPU machine: a 40 GB float16 chain (made there, never committed)
# split over three node processes capped at 16 GB each on the one GPU, then the same model on
# one uncapped node. Run from the repository root there, with .gl/ and .gpup/ carried:
#   source .gl/prelude.sh; bash benches/big/gpu-big.sh make       # the model (+ float64 reference)
#   source .gl/prelude.sh; bash benches/big/gpu-big.sh cluster    # three nodes, then one node
# The model goes to /tmp/m40, the nodes' weight caches to /dev/shm (RAM: the disk holds the model
# only); logs and the table go to $OUT (or /tmp/big-gpu).
set -euo pipefail
out=${OUT:-/tmp/big-gpu}
mkdir -p "$out" /tmp/g
[ -x /tmp/g/vkml-node ] || tar xJf .gpup/pack.tar.xz -C /tmp/g
model=/tmp/m40
case "${1:-}" in
make)
    df -h /tmp /dev/shm | tee "$out/df.txt"
    python3 benches/big/make_chain.py --out "$model" --bytes "${BYTES:-4e10}" --dtype float16 \
        --reference 2>&1 | tee "$out/make.log"
    ;;
cluster)
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee "$out/gpu-before.txt"
    python3 benches/big/big_submit.py --bin /tmp/g/vkml-node --model-dir "$model" \
        --device vulkan --cap-bytes "${CAP:-16e9}" --first-maps-model --cache-root /dev/shm/bigc \
        --no-restart --repeat "${REPEAT:-20}" --single --work "$out/work" \
        --start-timeout 120 --submit-timeout 400 2>&1 | tee "$out/cluster.log"
    rm -rf /dev/shm/bigc
    ;;
*)
    echo "usage: $0 make|cluster" >&2
    exit 2
    ;;
esac
