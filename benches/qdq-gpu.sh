#!/usr/bin/env bash
# The QDQ ResNet-50 (int8, benches/python/big_models.py qdq) against the f32 ResNet-50 it was
# quantized from, at batch 1 and 8, in one run on the GPU machine (issue 23's benchmark): the
# two models alternate, ROUNDS rounds of `vkml-node run --repeat 50`, medians of the per-run
# medians. Rows also for the QDQ model with the QDQ fusion off (VKML_FUSION=chains: the float
# graph of dequantized values), and a per-op profile of each model at batch 8.
# Usage (there, after the recipe's setup): bash benches/qdq-gpu.sh .gpu/vkml-node OUT_DIR
set -uo pipefail
bin=${1:-.gpu/vkml-node}
out=${2:-/tmp/qdq-out}
rounds=${ROUNDS:-3}
big=/tmp/vkml-big
mkdir -p "$out"
[ -e "$big/resnet50.onnx" ] || python3 benches/python/big_models.py make "$big" > "$out/big_make.log" 2>&1
python3 benches/python/big_models.py qdq "$big" > "$out/qdq_make.log" 2>&1 || { echo "quantizing failed: see qdq_make.log"; exit 1; }
median() { sed -n 's/.*median \([0-9.]*\) us.*/\1/p'; }
printf 'round\tmodel\tbatch\tfusion\tmedian_us\n' > "$out/qdq.tsv"
for r in $(seq "$rounds"); do
  for b in 1 8; do
    for m in resnet50 resnet50_qdq resnet50_qdq:chains; do
      model=${m%%:*}
      fusion=1
      [ "$m" != "$model" ] && fusion=${m#*:}
      med=$(VKML_FUSION=$fusion "$bin" run "$big/$model.onnx" --input x="$big/resnet50_x$b.npy" --device vulkan --repeat 50 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency | median)
      printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$model" "$b" "$fusion" "$med" >> "$out/qdq.tsv"
    done
  done
done
for m in resnet50 resnet50_qdq; do
  "$bin" run "$big/$m.onnx" --input x="$big/resnet50_x8.npy" --device vulkan --profile --repeat 20 --output-dir /tmp/o > "$out/profile_${m}_b8.txt" 2>&1
done
python3 - "$out/qdq.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = {}
for r in rows:
    if r["median_us"]:
        med.setdefault((r["model"], r["batch"], r["fusion"]), []).append(float(r["median_us"]))
print("| batch | f32 ResNet-50, ms | QDQ int8, ms | QDQ without the fusion, ms | f32 / int8 |")
print("|---|---|---|---|---|")
for b in ("1", "8"):
    f = statistics.median(med.get(("resnet50", b, "1"), [float("nan")])) / 1e3
    q = statistics.median(med.get(("resnet50_qdq", b, "1"), [float("nan")])) / 1e3
    c = statistics.median(med.get(("resnet50_qdq", b, "chains"), [float("nan")])) / 1e3
    print(f"| {b} | {f:.3f} | {q:.3f} | {c:.3f} | {f / q:.2f}x |")
PY
