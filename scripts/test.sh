#!/usr/bin/env bash
# The one test command: sets up a fresh Debian machine if needed (see setup.sh), then runs the
# checks CI runs: formatting, clippy with warnings as errors, and the whole test suite in
# release mode (the GPU tests on lavapipe where there is no GPU), ONNX's backend tests included
# (tests/conformance.rs; their data is fetched once by fetch-onnx-tests.sh), and last the
# Python package's tests (python-tests.sh: its wheel built into a fresh virtual environment,
# then pytest). VKML_SKIP_CONFORMANCE=1 leaves the ONNX backend tests out, VKML_SKIP_PYTHON=1
# the Python tests.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup.sh
. scripts/setup.sh
# shellcheck source=scripts/fetch-onnx-tests.sh
. scripts/fetch-onnx-tests.sh
# shellcheck source=scripts/python-tests.sh
. scripts/python-tests.sh

timed() {
    local start=$SECONDS
    "$@"
    echo "    ($((SECONDS - start)) s)"
}

total_start=$SECONDS
vkml_setup

if [ "${VKML_SKIP_CONFORMANCE:-}" != 1 ]; then
    step "ONNX backend test data"
    vkml_fetch_onnx_tests
    VKML_ONNX_TESTS="$(vkml_onnx_tests_dir)"
    export VKML_ONNX_TESTS
fi

step "cargo fmt --check"
timed cargo fmt --all --check

# Clippy checks the release profile the tests build: build scripts (glslang's C++, every
# shader) and proc macros are then built once for both, which halves the cold run.
step "cargo clippy --release --all-targets -- -D warnings"
timed cargo clippy --quiet --workspace --release --all-targets --locked -- -D warnings

step "cargo test --workspace --release"
timed cargo test --quiet --workspace --release --locked

if [ "${VKML_SKIP_PYTHON:-}" != 1 ]; then
    step "Python package: wheel, then pytest (python/tests)"
    timed vkml_python_tests
fi

step "All checks passed in $((SECONDS - total_start)) s"
