#!/usr/bin/env bash
# Fetches ONNX's backend test data (the node, pytorch-converted, pytorch-operator and simple
# suites) for tests/conformance.rs. The data ships inside the onnx 1.22.0 wheel on PyPI (later
# wheels dropped it): the wheel is downloaded once with pip, only onnx/backend/test/data/** is
# unpacked, and a stamp file marks the cache complete. Python runs here, never at test time.
#
# Cache: $VKML_ONNX_TESTS if set, else <repo>/target/onnx-tests/onnx-1.22.0. Prints the cache
# folder on its last line. Safe to run again: a complete cache is left alone.
#
# Can be sourced (defines vkml_fetch_onnx_tests) or run directly.

VKML_ONNX_VERSION="1.22.0"

vkml_onnx_tests_dir() {
    local repo
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    printf '%s\n' "${VKML_ONNX_TESTS:-$repo/target/onnx-tests/onnx-$VKML_ONNX_VERSION}"
}

vkml_fetch_onnx_tests() {
    local dest stamp
    dest="$(vkml_onnx_tests_dir)"
    stamp="$dest/.complete-onnx-$VKML_ONNX_VERSION"
    if [ -f "$stamp" ]; then
        echo "ONNX test data: cached in $dest"
        return 0
    fi
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install_for "downloading the onnx wheel" python3 python3-pip || return 1
    fi
    local tmp
    tmp="$(mktemp -d)"
    # The data is the same in every wheel of a release; asking for one fixed platform's wheel
    # (binary only, no dependencies) makes pip fetch it on any host, whatever its own Python.
    echo "downloading onnx==$VKML_ONNX_VERSION from PyPI"
    if ! python3 -m pip download --quiet --disable-pip-version-check "onnx==$VKML_ONNX_VERSION" \
        --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
        --python-version 3.11 --implementation cp --abi cp311 --dest "$tmp"; then
        rm -rf "$tmp"
        echo "error: pip could not download onnx==$VKML_ONNX_VERSION" >&2
        return 1
    fi
    local wheel
    wheel="$(find "$tmp" -maxdepth 1 -name "onnx-$VKML_ONNX_VERSION-*.whl" | head -n1)"
    if [ -z "$wheel" ]; then
        rm -rf "$tmp"
        echo "error: pip downloaded no onnx wheel into $tmp" >&2
        return 1
    fi
    rm -rf "$dest"
    mkdir -p "$dest"
    # zipfile rather than unzip: python3 is here anyway, unzip may not be.
    if ! python3 - "$wheel" "$dest" <<'EOF'; then
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "onnx/backend/test/data/"
suites = ("node/", "pytorch-converted/", "pytorch-operator/", "simple/")
count = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(prefix) or info.is_dir():
            continue
        rel = name[len(prefix):]
        if not rel.startswith(suites) or ".." in rel.split("/"):
            continue
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as src, open(out, "wb") as dst:
            dst.write(src.read())
        count += 1
if count == 0:
    sys.exit("the wheel holds no onnx/backend/test/data/")
print(f"unpacked {count} files")
EOF
        rm -rf "$tmp" "$dest"
        echo "error: unpacking $wheel failed" >&2
        return 1
    fi
    rm -rf "$tmp"
    date -u +%Y-%m-%dT%H:%M:%SZ >"$stamp"
    echo "ONNX test data: unpacked into $dest"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    # shellcheck source=scripts/setup.sh
    . "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
    vkml_fetch_onnx_tests
    vkml_onnx_tests_dir
fi
