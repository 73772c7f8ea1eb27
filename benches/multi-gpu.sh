#!/usr/bin/env bash
# Issue 26 on a machine with two GPUs (the device tool's nvidia-h200-x2), with the binaries
# benches/stage-gpu.sh staged in .gpu/ (see BENCHMARKS.md). From the repository root there:
#   source .gl/prelude.sh; bash benches/multi-gpu.sh checks     # correctness, each GPU and split
#   source .gl/prelude.sh; bash benches/multi-gpu.sh bandwidth  # GPU to GPU: bridge vs host path
#   source .gl/prelude.sh; bash benches/multi-gpu.sh split      # a model over both GPUs: one
#                                                               # process, then two nodes
#   source .gl/prelude.sh; bash benches/multi-gpu.sh llm        # the 8B-shaped LLM over both
# `all` runs the four. Logs under $OUT (default /tmp/vkml-multi-gpu); tables on stdout.
set -uo pipefail
what=${1:-all}
out=${OUT:-/tmp/vkml-multi-gpu}
mkdir -p "$out"
# The fixtures' paths are compiled into the binaries as /work/main/tests/..., hence the link.
[ -e /work/main/tests/fixtures ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; } 2>/dev/null
export VKML_NODE_BIN=.gpu/vkml-node

checks() {
  .gpu/vkml-node devices | tee "$out/devices.txt"
  # Every fixture and exported model against onnxruntime's outputs on each GPU (the tests that
  # ask for `vulkan` take VKML_TEST_VULKAN's GPU), then the exported models split over both
  # GPUs by the smallest cap per device that plans (VKML_TEST_SPLIT, tests/common/mod.rs).
  printf 'check\tresult\n' > "$out/checks.tsv"
  for sel in vulkan:0 vulkan:1; do
    for t in fixtures models; do
      log="$out/check_${t}_${sel/:/}.txt"
      VKML_TEST_VULKAN=$sel timeout 300 ".gpu/$t" --test-threads 8 vulkan > "$log" 2>&1
      printf '%s on %s\t%s\n' "$t" "$sel" "$(grep -E '^test result' "$log" | tail -1)" | tee -a "$out/checks.tsv"
    done
  done
  VKML_TEST_SPLIT=1 timeout 300 .gpu/models --test-threads 1 --nocapture vulkan > "$out/check_models_split.txt" 2>&1
  printf 'models split over both\t%s\n' "$(grep -E '^test result' "$out/check_models_split.txt" | tail -1)" | tee -a "$out/checks.tsv"
  # What those splits were: each model's cap and plan.
  grep '^split ' "$out/check_models_split.txt" | sed 's|^split .*/tests/models/||' | tee "$out/split_plans.txt"
  # The Vulkan layer's tests and the library's (two GPUs of one process among them) once more.
  for t in vulkan lib; do
    timeout 300 ".gpu/$t" --test-threads 8 > "$out/check_$t.txt" 2>&1
    printf '%s\t%s\n' "$t" "$(grep -E '^test result' "$out/check_$t.txt" | tail -1)" | tee -a "$out/checks.tsv"
  done
}

bandwidth() {
  timeout 300 .gpu/bench-transfer "${MAX_MIB:-1024}" 2>&1 | tee "$out/bandwidth.txt"
}

split() {
  # Compute dominates (BLOCKS x [BATCH, DIM] @ [DIM, DIM] f32: 8 x 64 MiB of weights, 69 GFLOP
  # a run) and a cut edge carries [BATCH, DIM] (4 MiB).
  m=/tmp/chain-multi-${BLOCKS:-8}-${DIM:-4096}-${BATCH:-256}
  python3 benches/big/make_chain.py --out "$m" --blocks "${BLOCKS:-8}" --dim "${DIM:-4096}" \
    --batch "${BATCH:-256}" --no-check > "$out/make_chain.txt" 2>&1
  VKML_BENCH_MULTI_GPU="$m/chain.onnx" VKML_BENCH_SECS=${SECS:-3} timeout 420 .gpu/bench-cluster --bench \
    > "$out/split.txt" 2> "$out/split.log"
  tail -8 "$out/split.txt"
}

llm() {
  # The 8B-shaped Llama of benches/llm/llama.py in f16 (16 GB): decode on GPU 0, over both
  # GPUs in one process (a cap of 10 GB per device), and over two nodes of one GPU each.
  dir=${VKML_LLM_WORK:-/tmp/vkml-llm-models}/8b-f16
  [ -f "$dir/model.onnx" ] || python3 benches/llm/llama.py make --shape 8b --dtype f16 --out "$dir" \
    > "$out/make-8b.log" 2>&1
  for setup in "vulkan:0" "vulkan 10e9"; do
    set -- $setup
    limit=()
    [ -n "${2:-}" ] && limit=(--device-memory-limit "$2")
    # Each GPU's memory in use, sampled through the run: where the weights went.
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 \
      > "$out/gpu-memory.csv" 2>/dev/null &
    smi=$!
    timeout 300 .gpu/bench-generation "$dir" --device "$1" "${limit[@]}" --prompt 128 --decode 32 --runs 2 \
      2>> "$out/generation.log" | tee -a "$out/generation.jsonl"
    kill "$smi" 2>/dev/null
    awk -F', ' '{ if ($2 > m[$1]) m[$1] = $2 } END { for (g in m) printf "  GPU %s: at most %s MiB in use\n", g, m[g] }' \
      "$out/gpu-memory.csv" | sort
  done
  VKML_BENCH_LLM="$dir" VKML_BENCH_LLM_NODES=2 VKML_BENCH_LLM_PERCENT=60 VKML_BENCH_DEVICE='vulkan:{i}' \
    VKML_BENCH_LLM_PROMPT=128 VKML_BENCH_LLM_DECODE=32 timeout 400 .gpu/bench-cluster --bench \
    2> "$out/llm-cluster.log" | tee "$out/llm-cluster.txt"
}

case $what in
checks) checks ;;
bandwidth) bandwidth ;;
split) split ;;
llm) llm ;;
all) checks; bandwidth; split; llm ;;
*)
  echo "usage: $0 checks|bandwidth|split|llm|all" >&2
  exit 2
  ;;
esac
