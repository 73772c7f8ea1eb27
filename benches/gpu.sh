#!/usr/bin/env bash
# Runs on the GPU machine (see BENCHMARKS.md): VKML on Vulkan and on its CPU backend, and the
# reference runtimes (onnxruntime CPU, PyTorch CUDA eager and graphs), in one run.
# Usage: benches/gpu.sh [VKML_BINARY]   (default .gpu/vkml-node). Logs under $OUT when set.
set -uo pipefail
bin=${1:-.gpu/vkml-node}
out=${OUT:-/tmp/vkml-bench}
mkdir -p "$out"
repeat() { case $1 in *10000*) echo 300 ;; *1000*) echo 1000 ;; *) echo 3000 ;; esac; }
"$bin" devices | tee "$out/devices.txt"

# Correctness first (benches/stage-gpu.sh stages these): every GPU kernel against its CPU
# kernel, every fixture and the PyTorch-exported models against onnxruntime, on this GPU. The
# fixtures' paths are compiled into the binaries as /work/main/tests/..., hence the link.
[ -e /work/main/tests/fixtures ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; } 2>/dev/null
printf 'check\tresult\n' > "$out/checks.tsv"
for t in ops vulkan gate lib fixtures models; do
  [ -x ".gpu/$t" ] || continue
  timeout 300 ".gpu/$t" --test-threads 8 > "$out/check_$t.txt" 2>&1
  printf '%s\t%s\n' "$t" "$(grep -E '^test result' "$out/check_$t.txt" | tail -1)" | tee -a "$out/checks.tsv"
done
printf 'model\tdevice\tmedian_us\n' > "$out/vkml.tsv"
python3 - > "$out/input.npy.ok" <<'PY'
import numpy as np
np.save("/tmp/x1.npy", np.array([0.5], dtype=np.float32))
PY
# The small workloads (issue 2): add chains and the MNIST-like CNN. VKML_BENCH_SMALL=0 skips them.
# The add chains measure the cost per dispatch, so they run unfused (VKML_FUSION=0); fusion has
# rows of its own below.
if [ "${VKML_BENCH_SMALL:-1}" = 1 ]; then
for n in 1 10 100 1000 10000; do
  for dev in vulkan cpu; do
    m=benches/models/add_chain_$n.onnx
    line=$(VKML_FUSION=0 "$bin" run "$m" --input x=/tmp/x1.npy --device $dev --repeat "$(repeat $n)" --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency)
    med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
    printf 'add_chain_%s\t%s\t%s\n' "$n" "$dev" "$med" | tee -a "$out/vkml.tsv"
  done
done
# The fixed cost with runs armed ahead behind the GPU's gate (the default; exec/gpu.rs ArmSlot)
# beside VKML_ARM=0 (submitted when the inputs are ready), alternated.
for round in 1 2; do
  for arm in 0 1; do
    line=$(VKML_ARM=$arm VKML_FUSION=0 "$bin" run benches/models/add_chain_1.onnx --input x=/tmp/x1.npy --device vulkan --repeat 3000 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency)
    med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
    printf 'add_chain_1_arm%s_round%s\tvulkan\t%s\n' "$arm" "$round" "$med" | tee -a "$out/vkml.tsv"
  done
done
# What a dispatch, a barrier and one run's round trip cost on this GPU, measured by the Vulkan
# layer alone (node/vulkan/benches/timing.rs: the dispatch, flag-chain and arming reports).
if [ -x .gpu/bench-timing ]; then
  .gpu/bench-timing > "$out/timing.txt" 2>&1
  grep -E 'dispatches|submit|armed|gated' "$out/timing.txt"
fi
for dev in vulkan cpu auto; do
  line=$("$bin" run tests/fixtures/mnist_cnn/model.onnx --test-data tests/fixtures/mnist_cnn/test_data_set_0 --device $dev --repeat 3000 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency)
  med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
  printf 'mnist_cnn\t%s\t%s\n' "$dev" "$med" | tee -a "$out/vkml.tsv"
done
# Fusion (issue 6): 16 elementwise ops on [1, 64, 128, 128] (1M floats), unfused (16
# dispatches, each reading and writing 4 MiB) and fused (graph/fuse.rs: 2 dispatches).
python3 -c "import numpy as np; np.save('/tmp/xchain.npy', np.random.default_rng(0).standard_normal((1, 64, 128, 128)).astype(np.float32))"
for fusion in 0 1; do
  for dev in vulkan cpu; do
    line=$(VKML_FUSION=$fusion "$bin" run benches/models/elementwise_chain_16.onnx --input x=/tmp/xchain.npy --device $dev --repeat 300 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency)
    med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
    printf 'elementwise_chain_16_fusion%s\t%s\t%s\n' "$fusion" "$dev" "$med" | tee -a "$out/vkml.tsv"
  done
done
# The same chain with the [1, 64, 128, 128] tensor made and reduced on the device (input
# [1, 64, 1, 1], output a scalar): moving 8 MiB to and from the host dominates the rows above,
# so these show what fusing saves on the GPU itself.
python3 -c "import numpy as np; np.save('/tmp/xres.npy', np.random.default_rng(0).standard_normal((1, 64, 1, 1)).astype(np.float32))"
for round in 1 2; do
  for fusion in 0 1; do
    line=$(VKML_FUSION=$fusion "$bin" run benches/models/elementwise_chain_16_resident.onnx --input x_in=/tmp/xres.npy --device vulkan --repeat 2000 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency)
    med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
    printf 'elementwise_chain_16_resident_fusion%s_round%s\tvulkan\t%s\n' "$fusion" "$round" "$med" | tee -a "$out/vkml.tsv"
  done
done
PYTHONUNBUFFERED=1 python3 benches/python/bench_reference.py > "$out/reference.jsonl" 2> "$out/reference.log"
echo "== reference runtimes"
python3 - "$out/reference.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    print(f"{r['workload']}\t{r['runner']}\t{r['median_us']:.1f}")
PY
fi

# The large workloads (issue 6): GEMM 4096^3 f32 and ResNet-50 at batch 1 and 8, made here
# because they are too big to commit. VKML_BENCH_BIG=0 skips them.
if [ "${VKML_BENCH_BIG:-1}" = 1 ]; then
  big=/tmp/vkml-big
  python3 benches/python/big_models.py make "$big" > "$out/big_make.log" 2>&1 || echo "making the big models failed: see big_make.log"
  median() { sed -n 's/.*median \([0-9.]*\) us.*/\1/p'; }
  for kernel in gemm gemm_big; do
    med=$(VKML_GEMM_KERNEL=$kernel "$bin" run "$big/gemm_4096.onnx" --input x="$big/zero.npy" --input row="$big/row.npy" --device vulkan --repeat 20 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency | median)
    # Four chained 4096^3 products per run.
    tflops=$(python3 -c "print(f'{4 * 2 * 4096**3 / float(\"$med\") / 1e6:.1f}')" 2>/dev/null)
    printf 'gemm_4096_f32_%s\tvulkan\t%s\t(%s TFLOP/s)\n' "$kernel" "$med" "$tflops" | tee -a "$out/vkml.tsv"
  done
  # The tensor-core path (ops/matmul/coop.rs): 16 chained products per run; VKML_GEMM_COOP
  # picks the KHR cooperative-matrix kernel (gemm_coop, the default for these aligned
  # operands) or NV cooperative matrix 2 (gemm_coop2).
  for half in f16 bf16; do
    for coop in khr nv2; do
      med=$(VKML_GEMM_COOP=$coop "$bin" run "$big/gemm_4096_$half.onnx" --input x="$big/zero.npy" --input row="$big/row.npy" --device vulkan --repeat 20 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency | median)
      tflops=$(python3 -c "print(f'{16 * 2 * 4096**3 / float(\"$med\") / 1e6:.1f}')" 2>/dev/null)
      printf 'gemm_4096_%s_%s\tvulkan\t%s\t(%s TFLOP/s)\n' "$half" "$coop" "$med" "$tflops" | tee -a "$out/vkml.tsv"
    done
  done
  # The tensor cores' ceilings through each Vulkan path, and each GEMM kernel alone on 4096^3
  # (node/vulkan/benches/coop.rs, node/ops/benches/coop_gemm.rs): tables of TFLOP/s.
  if [ -x .gpu/bench-coop ]; then
    .gpu/bench-coop > "$out/kernels.txt" 2>&1
    .gpu/bench-coop-gemm >> "$out/kernels.txt" 2>&1
    grep '^|' "$out/kernels.txt"
  fi
  for b in 1 8; do
    for dev in vulkan auto; do
      med=$("$bin" run "$big/resnet50.onnx" --input x="$big/resnet50_x$b.npy" --device $dev --repeat 50 --output-dir /tmp/o 2>>"$out/vkml.log" | grep latency | median)
      printf 'resnet50_b%s\t%s\t%s\n' "$b" "$dev" "$med" | tee -a "$out/vkml.tsv"
    done
  done
  # Peak host memory (max RSS) of a whole run of the 102 MB model (target: model + 64 MiB),
  # beside the same for `vkml-node devices` (the process with the Vulkan driver loaded and no
  # model) and the 12-op MNIST-like CNN.
  python3 - "$bin" "$big" >> "$out/vkml.tsv" <<'PY'
import resource, subprocess, sys
bin, big = sys.argv[1], sys.argv[2]
import os
def peak(args):
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: measure each in its own process.
    r = subprocess.run([sys.executable, "-c",
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)", *args], check=True, capture_output=True, text=True)
    return int(r.stdout) / 1024
print(f"peak_rss_devices_only\tvulkan\t{peak([bin, 'devices']):.1f} MiB")
print(f"peak_rss_mnist_cnn\tvulkan\t{peak([bin, 'run', 'tests/fixtures/mnist_cnn/model.onnx', '--test-data', 'tests/fixtures/mnist_cnn/test_data_set_0', '--device', 'vulkan', '--output-dir', '/tmp/o']):.1f} MiB")
print(f"peak_rss_resnet50\tvulkan\t{peak([bin, 'run', big + '/resnet50.onnx', '--input', 'x=' + big + '/resnet50_x1.npy', '--device', 'vulkan', '--output-dir', '/tmp/o']):.1f} MiB (model {os.path.getsize(big + '/resnet50.onnx') / 2**20:.1f} MiB)")
PY
  tail -3 "$out/vkml.tsv"
  PYTHONUNBUFFERED=1 python3 benches/python/big_models.py torch "$big" > "$out/reference_big.jsonl" 2>> "$out/reference.log"
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    extra = f\" ({r['tflops']:.1f} TFLOP/s)\" if 'tflops' in r else ''
    print(f\"{r['workload']}\t{r['runner']}\t{r['median_us']:.1f}{extra}\")
" "$out/reference_big.jsonl"
fi
# The cluster (issues 4 and 5), on loopback on this host: a 256 MiB tensor over QUIC against
# TCP, and models on one node against three (latency, overhead per cut edge, throughput at
# concurrency 1/4/16), with the nodes on the CPU and on this GPU. VKML_BENCH_CLUSTER=0 skips.
if [ "${VKML_BENCH_CLUSTER:-1}" = 1 ]; then
  [ -x .gpu/bench-transport ] && timeout 300 .gpu/bench-transport --bench > "$out/transport.txt" 2>&1
  for dev in cpu vulkan; do
    [ -x .gpu/bench-cluster ] && VKML_NODE_BIN="$bin" VKML_BENCH_DEVICE=$dev timeout 400 .gpu/bench-cluster --bench > "$out/cluster_$dev.txt" 2>&1
  done
  echo "== transport"; tail -8 "$out/transport.txt" 2>/dev/null
  for dev in cpu vulkan; do echo "== cluster ($dev)"; tail -14 "$out/cluster_$dev.txt" 2>/dev/null; done
fi
echo "== checks"
cat "$out/checks.tsv"
echo "== vkml"
cat "$out/vkml.tsv"
