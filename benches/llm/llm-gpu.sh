#!/usr/bin/env bash
# The LLM benchmark on the GPU machine (BENCHMARKS.md, "Language models"): makes a Llama-shaped
# model with random weights in f16 and in int4 (benches/llm/llama.py), times vkml's prefill and
# decode on it (benches/generation.rs, staged as .gpu/bench-generation), then PyTorch's on the
# same weights (transformers, static cache, CUDA). Prints a table last; JSON lines under $OUT.
# Usage, there: OUT=dir bash benches/llm/llm-gpu.sh [1b|8b|tiny] [vkml|torch|both|cluster]
# `cluster`: each dtype's model on one vkml-node and split over three (all on GPU 0), through
# the cluster API (benches/cluster.rs, VKML_BENCH_LLM): decode tokens/s and the cost per cut.
# Environment: VKML_LLM_PROMPTS (128,512,2048), VKML_LLM_DECODE (64), VKML_LLM_DTYPES ("f16 int4"),
# VKML_LLM_RUNS (3), VKML_LLM_PROFILE (1: also a decode step's GPU time by op type, from a
# profiled run of the first prompt length, into $OUT/profile-SHAPE-DTYPE.txt, and PyTorch's
# kernels of a generate call of the last prompt length into $OUT/torch-profile-SHAPE.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
shape=${1:-1b}
what=${2:-both}
out=${OUT:-/tmp/llm-out}
work=${VKML_LLM_WORK:-/tmp/vkml-llm-models}
prompts=${VKML_LLM_PROMPTS:-128,512,2048}
decode=${VKML_LLM_DECODE:-64}
dtypes=${VKML_LLM_DTYPES:-f16 int4}
runs=${VKML_LLM_RUNS:-3}
mkdir -p "$out" "$work"

if [ "$what" = cluster ]; then
    for dt in $dtypes; do
        dir="$work/$shape-$dt"
        [ -f "$dir/model.onnx" ] || python3 benches/llm/llama.py make --shape "$shape" \
            --dtype "$dt" --out "$dir" >"$out/make-$shape-$dt.log" 2>&1
        VKML_NODE_BIN=.gpu/vkml-node VKML_BENCH_DEVICE=vulkan:0 VKML_BENCH_LLM="$dir" \
            VKML_BENCH_LLM_PROMPT="${prompts%%,*}" VKML_BENCH_LLM_DECODE="$decode" \
            .gpu/bench-cluster --bench 2>"$out/cluster-$shape-$dt.log" | tee "$out/cluster-$shape-$dt.txt"
    done
    exit 0
fi
if [ "$what" != torch ]; then
    for dt in $dtypes; do
        dir="$work/$shape-$dt"
        if [ ! -f "$dir/model.onnx" ]; then
            start=$SECONDS
            python3 benches/llm/llama.py make --shape "$shape" --dtype "$dt" --out "$dir" \
                >"$out/make-$shape-$dt.log" 2>&1
            echo "made $dir in $((SECONDS - start)) s ($(du -sh "$dir" | cut -f1))"
        fi
        .gpu/bench-generation "$dir" --device vulkan:0 --prompt "$prompts" --decode "$decode" \
            --runs "$runs" 2>"$out/vkml-$shape-$dt.log" | tee "$out/vkml-$shape-$dt.jsonl"
        if [ "${VKML_LLM_PROFILE:-0}" = 1 ]; then
            .gpu/bench-generation "$dir" --device vulkan:0 --prompt "${prompts%%,*}" \
                --decode "$decode" --runs 1 --profile >"$out/profile-$shape-$dt.txt" 2>&1
        fi
    done
fi
if [ "$what" != vkml ]; then
    # shellcheck disable=SC2086
    profile=()
    if [ "${VKML_LLM_PROFILE:-0}" = 1 ]; then
        profile=(--profile "$out/torch-profile-$shape.txt")
    fi
    python3 benches/llm/llama.py torch --shape "$shape" --prompt ${prompts//,/ } \
        --decode "$decode" "${profile[@]}" 2>"$out/torch-$shape.log" | tee "$out/torch-$shape.json"
fi

python3 - "$out" "$shape" <<'EOF'
import json, os, sys
out, shape = sys.argv[1], sys.argv[2]
rows = {}
for dt in ("f16", "int4"):
    p = os.path.join(out, f"vkml-{shape}-{dt}.jsonl")
    if os.path.exists(p):
        for line in open(p):
            r = json.loads(line)
            rows.setdefault(r["prompt"], {})[f"vkml {dt}"] = r
p = os.path.join(out, f"torch-{shape}.json")
if os.path.exists(p) and os.path.getsize(p):
    t = json.load(open(p))
    for k, v in t.items():
        if k.startswith("prompt_"):
            rows.setdefault(int(k[7:]), {})["torch f16"] = v
print(f"\n{shape}: tokens/s (prefill of the prompt | decode after it)")
print(f"{'prompt':>7} " + " ".join(f"{c:>22}" for c in ("vkml f16", "vkml int4", "torch f16")))
for prompt in sorted(rows):
    cells = []
    for c in ("vkml f16", "vkml int4", "torch f16"):
        r = rows[prompt].get(c)
        cells.append(f"{r['prefill_tokens_per_s']:>10.0f} | {r['decode_tokens_per_s']:>8.1f}" if r else f"{'-':>22}")
    print(f"{prompt:>7} " + " ".join(f"{c:>22}" for c in cells))
EOF
