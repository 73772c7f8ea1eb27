#!/usr/bin/env bash
# Builds everything the GPU machine runs and stages it in .gpu/ (git-ignored), to be carried
# there with .gl/ (see BENCHMARKS.md): the stripped vkml-node binary, the test binaries
# benches/gpu.sh runs as its correctness checks (the ops' GPU-vs-CPU kernel tests, the Vulkan
# layer's and the library's tests, every fixture, the PyTorch-exported models) and the bench
# binaries it times with. The GPU machine has no Rust toolchain; it runs what this copies.
# Usage: benches/stage-gpu.sh   (then, there: bash benches/gpu.sh .gpu/vkml-node)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked --workspace --bins --lib --tests --benches
mkdir -p .gpu
cp "$target/release/vkml-node" .gpu/vkml-node
# The newest test executable of each name (cargo names them <test>-<hash>).
newest() { ls -t "$target"/release/deps/"$1"-* | grep -E "/$1-[0-9a-f]{16}$" | head -1; }
cp "$(newest vkml)" .gpu/lib
cp "$(newest vkml_ops)" .gpu/ops
cp "$(newest gpu)" .gpu/vulkan
cp "$(newest gate)" .gpu/gate
cp "$(newest fixtures)" .gpu/fixtures
cp "$(newest models)" .gpu/models
cp "$(newest cluster)" .gpu/bench-cluster
cp "$(newest transport)" .gpu/bench-transport
cp "$(newest timing)" .gpu/bench-timing
cp "$(newest transfer)" .gpu/bench-transfer
cp "$(newest coop)" .gpu/bench-coop
cp "$(newest coop_gemm)" .gpu/bench-coop-gemm
cp "$(newest decode_matmul)" .gpu/bench-decode-matmul
cp "$(newest generation)" .gpu/bench-generation
cp "$(newest llm)" .gpu/llm
# Unstripped, the binaries exceed what a device call may carry.
strip .gpu/*
du -sh .gpu
