#!/usr/bin/env bash
# Issue 24's table, one run per machine: VKML's CPU backend against onnxruntime's CPU provider
# with its default settings (all cores, all graph optimisations) on the same inputs, every row
# timed by both in the same run, and VKML's outputs checked against onnxruntime's so that no row
# times a wrong result. Rows:
#   real-sized models made by benches/python/cpu_models.py (SqueezeNet 1.1 f32 and fp16, a
#     YOLOv8n-style detector, a DB-style text detector, MobileNetV2, BERT-tiny), batch 1;
#   every exported family in tests/models: batch 1 from <name>_static and its test_data_set_0,
#     batch 8 from <name>_dynamic with test_data_set_0's rows repeated to 8;
#   ResNet-50 (benches/python/big_models.py), batch 1 and 8 (REPEAT/4 runs at batch 8);
#   the MNIST CNN of tests/fixtures (issue 24's target: 30 us or less).
# Columns: medians over REPEAT runs (us), vkml/ort, VKML's peak RSS in its own process
# (`vkml-node run --repeat 20`, one process per model so peaks do not mix) next to the model
# file's size (the target: RSS <= model + 64 MiB), and the output check.
#
# Usage: [BIN=...] [PYTHON=...] [REPEAT=200] [ROWS=substring] [DIR=/tmp/cpu-table] [OUT=DIR/out]
#        bash benches/cpu-table.sh
# BIN: a release vkml-node (default target/release/vkml-node); PYTHON (default python3) needs
# numpy, onnx, onnxruntime, and torch to make the models (once: they stay in DIR). ROWS keeps the
# rows whose name (e.g. resnet50_b8, bert_static_b2) contains the substring. The table is also
# written to OUT/cpu-table.tsv, every command's log to OUT/logs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${BIN:-target/release/vkml-node}
py=${PYTHON:-python3}
repeat=${REPEAT:-200}
filter=${ROWS:-}
dir=${DIR:-/tmp/cpu-table}
out=${OUT:-$dir/out}
models=benches/python/cpu_models.py

die() { echo "cpu-table: $*" >&2; exit 1; }
[ -x "$bin" ] || die "no vkml-node at '$bin' (cargo build --release --bin vkml-node, or set BIN)"
command -v "$py" > /dev/null || die "no '$py' (set PYTHON to a Python with numpy, onnx, onnxruntime)"
"$py" -c 'import numpy, onnx, onnxruntime' 2> /dev/null \
  || die "'$py' cannot import numpy, onnx and onnxruntime"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
mkdir -p "$dir" "$out/logs"

median() { sed -n 's/.*median \([0-9.]*\) us.*/\1/p'; }
wanted() { [ -z "$filter" ] || [[ $1 == *"$filter"* ]]; }

# Made on first use only, so a ROWS subset does not wait for models it does not time.
need_models() {
  [ -e "$dir/models/bert_tiny_128.onnx" ] && return
  "$py" -c 'import torch' 2> /dev/null || die "'$py' cannot import torch, needed to make the models"
  echo "making models in $dir/models (log: $out/logs/make_models.log)" >&2
  "$py" "$models" make "$dir/models" > "$out/logs/make_models.log" 2>&1 \
    || die "making the models failed: see $out/logs/make_models.log"
}
need_big() {
  [ -e "$dir/big/resnet50_x8.npy" ] && return
  "$py" -c 'import torch' 2> /dev/null || die "'$py' cannot import torch, needed to make ResNet-50"
  echo "making ResNet-50 in $dir/big (log: $out/logs/make_big.log)" >&2
  "$py" benches/python/big_models.py make "$dir/big" > "$out/logs/make_big.log" 2>&1 \
    || die "making ResNet-50 failed: see $out/logs/make_big.log"
}

commit=$(git rev-parse --short HEAD 2> /dev/null || echo "${COMMIT:-unknown}")
echo "commit $commit, nproc $(nproc), repeat $repeat, $("$py" -c 'import onnxruntime; print("onnxruntime", onnxruntime.__version__)')"
tsv=$out/cpu-table.tsv
printf 'model\tbatch\tvkml_median_us\tort_median_us\tvkml_over_ort\tvkml_peak_rss_mib\tmodel_mib\toutputs\tnote\n' > "$tsv"
fmt='%-24s %5s %12s %12s %7s %9s %9s  %s\n'
printf "$fmt" model batch "vkml us" "ort us" ratio "rss MiB" "model MiB" outputs

# row NAME BATCH MODEL RUNS TOL NAME=FILE...: one line of the table. A failure of either runtime
# is reported in the row (and its log kept), never aborts the table.
row() {
  local name=$1 batch=$2 model=$3 runs=$4 tol=$5
  shift 5
  local key=${name}_b$batch args=() files=() a
  wanted "$key" || return 0
  for a in "$@"; do args+=(--input "$a"); files+=("${a#*=}"); done
  local log=$out/logs/$key vdir=$out/vkml/$key odir=$out/ort/$key
  local vmed=ERR omed=ERR rss=ERR check=- note=""
  rm -rf "$vdir" "$odir"
  if "$bin" run "$model" "${args[@]}" --device cpu --repeat "$runs" --output-dir "$vdir" > "$log.vkml" 2>&1; then
    vmed=$(median < "$log.vkml")
    # Peak RSS of a process of its own: RUSAGE_CHILDREN of a fresh Python counts only the
    # vkml-node it waited for, not this script's earlier children.
    rss=$("$py" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
print("%.1f" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024) if r == 0 else "ERR")' \
      "$bin" run "$model" "${args[@]}" --device cpu --repeat 20 --output-dir "$vdir.rss")
    rm -rf "$vdir.rss"
  else
    note="vkml: $(grep -v '^\s*$' "$log.vkml" | tail -1)"
  fi
  if ORT_OUT_DIR=$odir "$py" "$models" ort "$model" "$runs" "${files[@]}" > "$log.ort" 2>&1; then
    omed=$(tail -1 "$log.ort")
  else
    note="${note:+$note; }ort: $(grep -v '^\s*$' "$log.ort" | tail -1)"
  fi
  if [ "$vmed" != ERR ] && [ "$omed" != ERR ]; then
    # vkml-node prints `name: type [shape] -> DIR/name.npy` per output, in graph order.
    local mine
    mapfile -t mine < <(sed -n 's/.* -> \(.*\.npy\)$/\1/p' "$log.vkml")
    local theirs=() i
    for ((i = 0; i < $(ls "$odir" | wc -l); i++)); do theirs+=("$odir/out$i.npy"); done
    check=$("$py" "$models" compare "$tol" "${mine[@]}" -- "${theirs[@]}" 2>&1 | tail -1)
  fi
  local ratio=-
  [ "$vmed" != ERR ] && [ "$omed" != ERR ] && ratio=$(awk -v v="$vmed" -v o="$omed" 'BEGIN { printf "%.2f", v / o }')
  local mib
  mib=$(awk -v b="$(stat -c %s "$model")" 'BEGIN { printf "%.1f", b / 1048576 }')
  printf "$fmt" "$name" "$batch" "$vmed" "$omed" "$ratio" "$rss" "$mib" "$check${note:+  ($note)}"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$batch" "$vmed" "$omed" "$ratio" "$rss" "$mib" "$check" "$note" >> "$tsv"
}

# feed_row NAME MODEL_DIR DATA_DIR [BATCH]: a row from ONNX test data, written as .npy first
# (rows repeated to BATCH when given); the batch shown is the inputs' leading dimension.
feed_row() {
  local name=$1 mdir=$2 data=$3 batch=${4:-} feeds
  mkdir -p "$dir/feeds"
  feeds=$("$py" "$models" feeds "$mdir/model.onnx" "$data" "$dir/feeds/${name}${batch:+_b$batch}" $batch) \
    || { echo "cpu-table: could not read $data" >&2; return; }
  # shellcheck disable=SC2086  # NAME=FILE words without spaces
  set -- $feeds
  local b
  b=$("$py" -c 'import sys, numpy; print(numpy.load(sys.argv[1], mmap_mode="r").shape[0])' "${1#*=}")
  row "$name" "$b" "$mdir/model.onnx" "$repeat" 1e-3 "$@"
}

# Real-sized models, batch 1 (fp16 compared at 1e-2: float16 rounding differs between kernels).
for spec in squeezenet11:x yolov8n_320:images db_text_160:x mobilenetv2_224:x \
            bert_tiny_128:input_ids,attention_mask squeezenet11_fp16:x; do
  m=${spec%%:*}
  wanted "${m}_b1" || continue
  need_models
  tol=1e-3
  [[ $m == *fp16 ]] && tol=1e-2
  ins=()
  IFS=, read -ra names <<< "${spec#*:}"
  for n in "${names[@]}"; do ins+=("$n=$dir/models/${m}_$n.npy"); done
  row "$m" 1 "$dir/models/$m.onnx" "$repeat" "$tol" "${ins[@]}"
done

# Every exported family in tests/models.
for fam in resnet mobilenetv2 yolo bert gpt2 vit whisper_encoder; do
  s=tests/models/${fam}_static d=tests/models/${fam}_dynamic
  # The static models' batch (bert_static's is 2) is known once the inputs are read, so these
  # rows are filtered by row() itself.
  feed_row "${fam}_static" "$s" "$s/test_data_set_0"
  feed_row "${fam}_dynamic" "$d" "$d/test_data_set_0" 8
done

# ResNet-50 from benches/python/big_models.py; batch 8 is 8x the work, so a quarter the runs.
for b in 1 8; do
  wanted "resnet50_b$b" || continue
  need_big
  runs=$repeat
  [ "$b" = 8 ] && runs=$(( repeat / 4 > 0 ? repeat / 4 : 1 ))
  row resnet50 "$b" "$dir/big/resnet50.onnx" "$runs" 1e-3 "x=$dir/big/resnet50_x$b.npy"
done

# The MNIST CNN (target: VKML at or below 30 us).
m=tests/fixtures/mnist_cnn
feed_row mnist_cnn "$m" "$m/test_data_set_0"
echo "table: $tsv, logs: $out/logs"
