#!/usr/bin/env bash
# The one test command: sets up a fresh Debian machine if needed (see setup.sh), then runs the
# checks CI runs: formatting, clippy with warnings as errors, and the whole test suite in
# release mode (the GPU tests on lavapipe where there is no GPU). Needs no Python.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

timed() {
    local start=$SECONDS
    "$@"
    echo "    ($((SECONDS - start)) s)"
}

total_start=$SECONDS
vkml_setup

step "cargo fmt --check"
timed cargo fmt --all --check

step "cargo clippy --all-targets -- -D warnings"
timed cargo clippy --quiet --workspace --all-targets --locked -- -D warnings

step "cargo test --workspace --release"
timed cargo test --quiet --workspace --release --locked

step "All checks passed in $((SECONDS - total_start)) s"
