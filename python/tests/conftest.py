"""Shared helpers: the repository's fixtures and exported models, read with onnx's own
numpy_helper (the references are onnxruntime's outputs, committed as TensorProto files)."""

import os
import pathlib
import threading

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

import vkml

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
MODELS = REPO / "tests" / "models"
# The Rust tests' tolerance (tests/common/mod.rs): |got - want| <= REL * |want| + ABS.
REL = 1e-4
ABS = 1e-5


def read_pb(path):
    t = TensorProto()
    t.ParseFromString(path.read_bytes())
    return t.name, numpy_helper.to_array(t)


def numbered(folder, prefix):
    out = []
    i = 0
    while (folder / f"{prefix}_{i}.pb").exists():
        out.append(read_pb(folder / f"{prefix}_{i}.pb"))
        i += 1
    return out


def data_sets(folder):
    """(inputs, outputs) of each test_data_set_<k>, each a list of (name, array)."""
    sets = sorted(folder.glob("test_data_set_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    return [(numbered(s, "input"), numbered(s, "output")) for s in sets]


def assert_matches(got, want, context):
    assert got.shape == want.shape, f"{context}: shape {got.shape} != {want.shape}"
    if np.issubdtype(want.dtype, np.floating):
        assert got.dtype == want.dtype, f"{context}: dtype {got.dtype} != {want.dtype}"
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = ~(np.abs(g - w) <= REL * np.abs(w) + ABS)
        bad &= ~(np.isnan(g) & np.isnan(w))
        assert not bad.any(), (
            f"{context}: {int(bad.sum())} of {w.size} elements off, the first at "
            f"{np.argwhere(bad)[0].tolist()}: {g[bad][0]} against {w[bad][0]}")
    else:
        np.testing.assert_array_equal(got, want, err_msg=context)


def in_threads(count, work):
    """Runs work(t) for t in range(count), each on a thread of its own; returns the messages
    of the assertions that failed."""
    failures = []

    def guarded(t):
        try:
            work(t)
        except AssertionError as e:
            failures.append(str(e))

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def vulkan_skipped():
    return os.environ.get("VKML_SKIP_VULKAN") == "1" or "VulkanExecutionProvider" not in \
        vkml.get_available_providers()


PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    # Vulkan alone: the GPU runs every op it has a kernel for, as in tests/fixtures.rs (with
    # the CPU listed too, the planner may keep a small model on the CPU).
    "vulkan": ["VulkanExecutionProvider"],
}


@pytest.fixture(params=sorted(PROVIDERS))
def providers(request):
    if request.param == "vulkan" and vulkan_skipped():
        pytest.skip("no Vulkan device")
    return PROVIDERS[request.param]
