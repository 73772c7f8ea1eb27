#!/usr/bin/env bash
# The README's main job: build vkml-node and run the MNIST-like CNN on its test input, writing
# out/probabilities.npy; then print each output's shape and argmax (read straight from the .npy,
# so no Python is needed). Extra arguments go to `vkml-node run` (e.g. --device cpu).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup.sh
. scripts/setup.sh
vkml_setup

step "cargo build --release"
if [ ! -x "${CARGO_TARGET_DIR:-target}/release/vkml-node" ]; then
    # Most of the first build is glslang's C++ (built from source by its crate, so no Vulkan
    # SDK is needed) and the ~300 shader variants it then compiles.
    echo "the first build takes 15-20 minutes on 2 cores (later ones take seconds); cargo shows its progress"
fi
cargo build --release --locked --bin vkml-node
bin="${CARGO_TARGET_DIR:-target}/release/vkml-node"

fixture=tests/fixtures/mnist_cnn
step "vkml-node run $fixture/model.onnx --test-data $fixture/test_data_set_0 --output-dir out/ $*"
rm -rf out
"$bin" run "$fixture/model.onnx" --test-data "$fixture/test_data_set_0" --output-dir out/ "$@"

# Prints "<file>: shape (...), argmax over the last axis [...]" for a little-endian float32 .npy.
summarise_npy() {
    local file=$1 version header_len offset header shape last
    version=$(od -A n -t u1 -j 6 -N 1 "$file" | tr -d ' ')
    if [ "$version" = 1 ]; then
        header_len=$(od -A n -t u2 -j 8 -N 2 --endian=little "$file" | tr -d ' ')
        offset=$((10 + header_len))
    else
        header_len=$(od -A n -t u4 -j 8 -N 4 --endian=little "$file" | tr -d ' ')
        offset=$((12 + header_len))
    fi
    header=$(dd if="$file" bs=1 skip=$((offset - header_len)) count="$header_len" 2>/dev/null)
    shape=$(sed -E "s/.*'shape': *\(([^)]*)\).*/\1/" <<<"$header" | tr -d ' ' | sed 's/,$//')
    if ! grep -q "'descr': *'<f4'" <<<"$header"; then
        echo "$file: shape ($shape) (not float32: no argmax)"
        return 0
    fi
    last=${shape##*,}
    [ -n "$last" ] || last=1
    od -A n -t f4 -v -j "$offset" --endian=little -w4 "$file" | awk -v n="$last" -v f="$file" -v s="$shape" '
        { v = $1 + 0; i = (NR - 1) % n
          if (i == 0 || v > best) { best = v; arg = i }
          if (i == n - 1) { out = out (out == "" ? "" : ", ") arg } }
        END { printf "%s: shape (%s), argmax over the last axis [%s]\n", f, s, out }'
}

step "Outputs"
for f in out/*.npy; do
    summarise_npy "$f"
done
