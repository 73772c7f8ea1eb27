#!/usr/bin/env bash
# The Python package's tests (python/): builds the wheel with maturin into a fresh virtual
# environment under target/ and runs pytest there, against the committed fixtures and
# onnxruntime references. The wheel builds in the workspace's target folder, so the Rust code
# the test step compiled is reused. Can be sourced (defines vkml_python_tests) or run directly.
#
# Needs python3 with venv (python3-venv on Debian, installed when missing) and PyPI for
# maturin, numpy, onnx (to read the references) and pytest.

vkml_python_tests() {
    local repo venv
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    venv="$repo/target/py-venv"
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        apt_install_for "the Python tests' virtual environment" python3 python3-venv || return 1
    fi
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "maturin>=1.9,<2" "numpy>=1.21" "onnx>=1.16" pytest || return 1
    rm -rf "$repo/target/wheels"
    (cd "$repo" && "$venv/bin/maturin" build --quiet --release --locked \
        -m python/Cargo.toml -o target/wheels -i "$venv/bin/python") || return 1
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
        "$repo"/target/wheels/vkml-*.whl || return 1
    # The cluster tests start vkml-node processes (built already by the test step). Built as
    # part of the whole workspace, as the test step builds it: `--bin vkml-node` alone selects
    # fewer packages, so Cargo unifies other features of shared dependencies (syn's through
    # pyo3's macros, serde's through criterion) and rebuilt 56 crates, ~250 s of a cold run.
    (cd "$repo" && cargo build --quiet --release --locked --workspace --bins) || return 1
    # From the tests' folder, so that `import vkml` is the installed wheel, not python/vkml.
    # Bounded, as every test of the suite is: the cluster tests start processes.
    (cd "$repo/python/tests" && VKML_NODE_BIN="$repo/target/release/vkml-node" \
        timeout 900 "$venv/bin/python" -m pytest -q -p no:cacheprovider .)
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    # shellcheck source=scripts/setup.sh
    . "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
    vkml_python_tests
fi
