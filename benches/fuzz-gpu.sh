#!/usr/bin/env bash
# The long fuzz campaigns of issue 18 on the GPU machine's cores: 10^5 mutated models (on the
# CPU backend, then a shorter run on Vulkan), 10^5 random frames and fragments sent to a live
# node, 10^5 tensor files. Findings and logs go under OUT; a short table comes last.
# Usage: bash benches/fuzz-gpu.sh VKML_FUZZ ONNX_NODE_TESTS_PARENT OUT [CASES [SEED]]
#   VKML_FUZZ: the vkml-fuzz binary; ONNX_NODE_TESTS_PARENT: the folder holding ONNX's node/
#   backend tests (seeds, as in scripts/test.sh).
set -uo pipefail
fuzz=$1 onnx=$2 out=$3 cases=${4:-100000} seed=${5:-1}
jobs=$(nproc)
mkdir -p "$out"
run() { # name, then vkml-fuzz run arguments
    local name=$1
    shift
    local t0=$SECONDS
    "$fuzz" run "$@" --jobs "$jobs" --seed "$seed" --findings "$out/findings-$name" \
        --corpus "$out/corpus-$name" >"$out/$name.log" 2>&1
    local rc=$?
    local found
    found=$(find "$out/findings-$name" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
    printf '%-16s %8s cases %6s s  exit %s  findings %s\n' "$name" "$(grep -oE '^[a-z]+: [0-9]+ cases' "$out/$name.log" | grep -oE '[0-9]+' | head -1)" \
        "$((SECONDS - t0))" "$rc" "$found" >>"$out/table.txt"
}
seeds=(--seeds tests/fixtures --seeds "$onnx")
run models --target models "${seeds[@]}" --cases "$cases"
run models-vulkan --target models "${seeds[@]}" --cases "$((cases / 10))" --device vulkan
run frames --target frames --cases "$cases"
run tensors --target tensors --cases "$cases"
# The findings themselves (not the workers' scratch), for replay.
tar czf "$out/findings.tar.gz" -C "$out" $(cd "$out" && ls -d findings-* 2>/dev/null) --exclude='.*' 2>/dev/null
echo "jobs $jobs, $(nproc) cores"
cat "$out/table.txt"
