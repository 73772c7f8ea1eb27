"""Every committed fixture and exported model through vkml.InferenceSession, on the CPU and on
Vulkan, against onnxruntime's outputs."""

import pytest

import vkml
from conftest import FIXTURES, MODELS, assert_matches, data_sets

CASES = sorted(p.parent for p in FIXTURES.glob("*/model.onnx") if p.parent.name != "malformed")
CASES += sorted(p.parent for p in MODELS.glob("*/model.onnx")
                if not p.parent.name.startswith("llama"))  # caches: tests/llm.rs


@pytest.mark.parametrize("folder", CASES, ids=[c.name for c in CASES])
def test_matches_onnxruntime(folder, providers):
    sess = vkml.InferenceSession(str(folder / "model.onnx"), providers=providers)
    declared = [i.name for i in sess.get_inputs()]
    sets = data_sets(folder)
    assert sets, f"{folder}: no test_data_set_<k>"
    for k, (inputs, outputs) in enumerate(sets):
        # A TensorProto without a name stands for the input in its position.
        feeds = {name or declared[i]: value for i, (name, value) in enumerate(inputs)}
        got = sess.run(None, feeds)
        assert len(got) == len(outputs)
        for j, (g, (name, want)) in enumerate(zip(got, outputs)):
            assert_matches(g, want, f"{folder.name} set {k} output {name or j} on {providers[0]}")
