"""onnxruntime's OrtValue and io_binding in vkml, against onnxruntime's committed outputs: a
fixture run through a binding, and greedy loops of both tiny Llama exports written with
io_binding alone (each run's caches fed back to the next as OrtValues) against the greedy
tokens of onnxruntime's own loop (reference.json) and its step outputs (test_data_set_<k>)."""

import json

import numpy as np
import pytest

import vkml
from conftest import FIXTURES, MODELS, assert_matches, data_sets
from vkml import OrtValue

MNIST = FIXTURES / "mnist_cnn"


def test_a_bound_run_matches_onnxruntime(providers):
    sess = vkml.InferenceSession(str(MNIST / "model.onnx"), providers=providers)
    x, y = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    binding = sess.io_binding()
    binding.bind_output(y, "vulkan" if "VulkanExecutionProvider" in providers else "cpu")
    sets = data_sets(MNIST)
    assert len(sets) >= 2
    for k, (inputs, outputs) in enumerate(sets):
        value, want = inputs[0][1], outputs[0][1]
        # A numpy array and an OrtValue made for the GPU, in turn; binding a name again
        # replaces its value.
        if k % 2:
            binding.bind_ortvalue_input(x, OrtValue.ortvalue_from_numpy(value, "vulkan", 0))
        else:
            binding.bind_cpu_input(x, value)
        sess.run_with_iobinding(binding)
        (got,) = binding.get_outputs()
        assert got.shape() == list(want.shape) and got.data_type() == "tensor(float)"
        assert got.element_type() is np.float32 and got.is_tensor() and got.has_value()
        assert_matches(got.numpy(), want, f"mnist_cnn set {k} through io_binding")
        (copied,) = binding.copy_outputs_to_cpu()
        assert_matches(copied, want, f"mnist_cnn set {k}, copy_outputs_to_cpu")


def test_ortvalues_hold_what_they_are_given():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    v = OrtValue.ortvalue_from_numpy(a, "Vulkan")
    assert v.device_name() == "vulkan" and v.shape() == [3, 4]
    assert v.data_type() == "tensor(int64)" and v.element_type() is np.int64
    np.testing.assert_array_equal(v.numpy(), a)
    z = OrtValue.ortvalue_from_shape_and_type([2, 0, 5], np.float16)
    assert z.device_name() == "cpu" and z.shape() == [2, 0, 5]
    assert z.data_type() == "tensor(float16)"
    # update_inplace keeps the value's shape and takes its type and element count only.
    v.update_inplace(np.arange(100, 112, dtype=np.int64))
    np.testing.assert_array_equal(v.numpy(), np.arange(100, 112).reshape(3, 4))
    with pytest.raises(vkml.InvalidInput, match="type and size"):
        v.update_inplace(np.zeros(12, np.int32))
    with pytest.raises(vkml.InvalidInput, match="type and size"):
        v.update_inplace(np.zeros(13, np.int64))
    with pytest.raises(vkml.VkmlError, match="pointer"):
        v.data_ptr()
    with pytest.raises(vkml.InvalidInput, match="'cpu' or 'vulkan'"):
        OrtValue.ortvalue_from_numpy(a, "cuda")
    with pytest.raises(vkml.InvalidInput, match="dtype"):
        OrtValue.ortvalue_from_numpy(a.astype(np.complex64))


# ---------------------------------------------------------------------------------------------
# Language models: the caches fed back


def cache_dims(form):
    """(key/value heads, head size) from the folder's config."""
    if form == "llama_genai":
        d = json.loads((MODELS / form / "genai_config.json").read_text())["model"]["decoder"]
        return d["num_key_value_heads"], d["head_size"]
    c = json.loads((MODELS / form / "config.json").read_text())
    return c["num_key_value_heads"], c["head_dim"]


def reference(form):
    return json.loads((MODELS / form / "reference.json").read_text())


def greedy(sess, form, prompt, new_tokens, device, shared_value=False, after_step=None):
    """Greedy tokens after `prompt`, run with io_binding alone. llama_genai's caches are one
    buffer past and present share (GroupQueryAttention writes each step's rows into it, the
    attention mask spans it: ONNX Runtime GenAI's loop), as long as the whole sequence;
    llama_optimum's grow by each step's rows. Each run's `present.*` OrtValues are bound as
    the next run's `past_key_values.*`, or, with `shared_value`, one OrtValue per cache is
    bound as both (bind_ortvalue_output). `after_step(step, outputs)` sees each run's
    outputs (logits, then the presents in the order of the pasts)."""
    names = [i.name for i in sess.get_inputs()]
    past = [n for n in names if n.startswith("past_key_values.")]
    present = ["present." + p[len("past_key_values."):] for p in past]
    heads, size = cache_dims(form)
    rows = len(prompt) + new_tokens if form == "llama_genai" else 0
    binding = sess.io_binding()
    binding.bind_output("logits", device)
    for p, q in zip(past, present):
        cache = OrtValue.ortvalue_from_shape_and_type([1, heads, rows, size], np.float32, device)
        binding.bind_ortvalue_input(p, cache)
        if shared_value:
            binding.bind_ortvalue_output(q, cache)
        else:
            binding.bind_output(q, device)
    tokens, new, done = [], list(prompt), 0
    for step in range(new_tokens):
        total = done + len(new)
        binding.bind_cpu_input("input_ids", np.array([new], dtype=np.int64))
        width = rows if rows else total
        binding.bind_cpu_input("attention_mask",
                               (np.arange(width) < total).astype(np.int64)[None, :])
        if "position_ids" in names:
            binding.bind_cpu_input("position_ids", np.arange(done, total, dtype=np.int64)[None, :])
        sess.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        assert len(outputs) == 1 + len(past)
        tokens.append(int(np.argmax(outputs[0].numpy()[0, -1])))
        if not shared_value:
            for p, value in zip(past, outputs[1:]):
                binding.bind_ortvalue_input(p, value)
        if after_step is not None:
            after_step(step, outputs)
        done, new = total, [tokens[-1]]
    return tokens


LOOPS = [("llama_genai", False), ("llama_optimum", False), ("llama_genai", True)]


@pytest.mark.parametrize("form,shared_value", LOOPS,
                         ids=["llama_genai", "llama_optimum", "llama_genai-shared_ortvalue"])
def test_an_io_binding_loop_generates_onnxruntime_s_tokens(form, shared_value, providers):
    r = reference(form)
    sess = vkml.InferenceSession(str(MODELS / form / "model.onnx"), providers=providers)
    on_vulkan = providers == ["VulkanExecutionProvider"]
    device = "vulkan" if on_vulkan else "cpu"
    seen = {}

    def after_step(step, outputs):
        if step == 2:
            seen["on_device"] = outputs[1]._on_device()
            seen["device_name"] = outputs[1].device_name()

    tokens = greedy(sess, form, r["prompt_ids"], len(r["greedy_ids"]), device, shared_value,
                    after_step)
    assert tokens == r["greedy_ids"]
    if form == "llama_genai":
        # GroupQueryAttention writes the shared buffer in place: on Vulkan the caches stayed
        # in the GPU's buffer from the second run on, never read back.
        assert seen["on_device"] == on_vulkan
        assert seen["device_name"] == device
    else:
        assert not seen["on_device"] or on_vulkan


def test_fed_back_values_match_onnxruntime_s_steps_and_go_stale(providers):
    form = "llama_optimum"
    sess = vkml.InferenceSession(str(MODELS / form / "model.onnx"), providers=providers)
    sets = data_sets(MODELS / form)
    runs = []

    def after_step(step, outputs):
        runs.append(outputs)
        if step == 0:
            return
        # The previous run's caches were fed to this one. Fed through the runtime's bound
        # state from the second fed-back run on (the third run), they were updated in place
        # and read as stale; the first run's came from the host and stay readable.
        if step >= 2:
            with pytest.raises(vkml.InvalidInput, match="updated in place by a later run"):
                runs[step - 1][1].numpy()
        else:
            runs[step - 1][1].numpy()

    def check_step(step, outputs):
        # The step's outputs equal onnxruntime's for the same feeds (the same greedy path).
        if step < len(sets):
            for value, (name, want) in zip(outputs, sets[step][1]):
                assert_matches(value.numpy(), want, f"{form} step {step} {name}")
        after_step(step, outputs)

    r = reference(form)
    tokens = greedy(sess, form, r["prompt_ids"], 5, "cpu", after_step=check_step)
    assert tokens == r["greedy_ids"][:5]


def test_a_value_bound_as_input_and_output_is_updated_in_place():
    form = "llama_genai"
    sess = vkml.InferenceSession(str(MODELS / form / "model.onnx"),
                                 providers=["CPUExecutionProvider"])
    sets = data_sets(MODELS / form)
    r = reference(form)
    rows = len(r["prompt_ids"]) + 4

    def after_step(step, outputs):
        # The OrtValues bound with bind_ortvalue_output are the ones get_outputs gives, each
        # holding the whole buffer: its first rows are onnxruntime's present of the step.
        if step < len(sets):
            name, want = sets[step][1][1]
            assert name == "present.0.key"
            got = outputs[1].numpy()
            assert got.shape == (1, want.shape[1], rows, want.shape[3])
            assert_matches(got[:, :, :want.shape[2]], want, f"{form} step {step} {name}")

    values = []

    def check_step(step, outputs):
        values.append(outputs[1])
        after_step(step, outputs)

    tokens = greedy(sess, form, r["prompt_ids"], 4, "cpu", shared_value=True,
                    after_step=check_step)
    assert tokens == r["greedy_ids"][:4]
    assert all(v is values[0] for v in values)


def test_binding_errors_raise_the_runtime_s_exceptions():
    sess = vkml.InferenceSession(str(MNIST / "model.onnx"), providers=["CPUExecutionProvider"])
    x, y = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    value = data_sets(MNIST)[0][0][0][1]
    binding = sess.io_binding()
    with pytest.raises(vkml.InvalidInput, match="bind_cpu_input"):
        binding.bind_input(x, "cpu", 0, np.float32, list(value.shape), 12345678)
    with pytest.raises(vkml.InvalidInput, match="pointer"):
        binding.bind_output(y, "cpu", 0, np.float32, [1, 10], 12345678)
    with pytest.raises(vkml.InvalidInput, match=f"no input named 'nope' \\(its inputs: {x}\\)"):
        binding.bind_cpu_input("nope", value)
    with pytest.raises(vkml.InvalidInput, match=f"no output named 'nope' \\(its outputs: {y}\\)"):
        binding.bind_output("nope")
    with pytest.raises(vkml.InvalidInput, match="'cpu' or 'vulkan'"):
        binding.bind_output(y, "cuda")
    with pytest.raises(vkml.InvalidInput, match="OrtValue"):
        binding.bind_ortvalue_input(x, value)
    binding.bind_output(y)
    with pytest.raises(vkml.InvalidInput, match="missing input"):
        sess.run_with_iobinding(binding)
    binding.bind_cpu_input(x, value.astype(np.int32))
    with pytest.raises(vkml.InvalidInput):
        sess.run_with_iobinding(binding)
    other = vkml.InferenceSession(str(MNIST / "model.onnx"), providers=["CPUExecutionProvider"])
    with pytest.raises(vkml.InvalidInput, match="IOBinding of this session"):
        other.run_with_iobinding(binding)
    # Cleared outputs: a run gives none.
    binding.bind_cpu_input(x, value)
    binding.clear_binding_outputs()
    sess.run_with_iobinding(binding)
    assert binding.get_outputs() == []
    binding.clear_binding_inputs()
    with pytest.raises(vkml.InvalidInput, match="missing input"):
        sess.run_with_iobinding(binding)
