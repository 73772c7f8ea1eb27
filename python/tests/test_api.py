"""onnxruntime's API shapes, errors and threads."""

import numpy as np
import pytest

import vkml
from conftest import FIXTURES, MODELS, assert_matches, data_sets, in_threads

MNIST = FIXTURES / "mnist_cnn" / "model.onnx"
MALFORMED = FIXTURES / "malformed"


def test_providers_and_device():
    available = vkml.get_available_providers()
    assert available[-1] == "CPUExecutionProvider"
    assert set(available) <= set(vkml.get_all_providers())
    assert vkml.get_device() == ("GPU" if "VulkanExecutionProvider" in available else "CPU")
    sess = vkml.InferenceSession(str(MNIST), providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_providers_vkml_lacks_are_skipped_with_a_warning():
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess = vkml.InferenceSession(
            str(MNIST), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.warns(UserWarning), pytest.raises(vkml.DeviceError, match="none of the providers"):
        vkml.InferenceSession(str(MNIST), providers=["CUDAExecutionProvider"])


def test_inputs_and_outputs_describe_the_model():
    sess = vkml.InferenceSession(str(FIXTURES / "mnist_cnn_dynamic" / "model.onnx"),
                                 providers=["CPUExecutionProvider"])
    (x,) = sess.get_inputs()
    assert isinstance(x.name, str) and x.type == "tensor(float)"
    # A symbolic batch size comes as its name, fixed sizes as ints.
    assert isinstance(x.shape[0], str) and x.shape[1:] == [1, 28, 28]
    (y,) = sess.get_outputs()
    assert y.type == "tensor(float)" and isinstance(y.shape[0], str) and y.shape[1] == 10
    assert "NodeArg" in repr(x)


def test_output_names_select_and_order_outputs():
    folder = MODELS / "bert_static"
    sess = vkml.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs, outputs = data_sets(folder)[0]
    feeds = {name: value for name, value in inputs}
    names = [o.name for o in sess.get_outputs()]
    every = sess.run(None, feeds)
    picked = sess.run(list(reversed(names)), feeds)
    assert len(every) == len(names) == len(outputs)
    for g, p in zip(every, reversed(picked)):
        np.testing.assert_array_equal(g, p)


def test_a_model_given_as_bytes_runs():
    sess = vkml.InferenceSession(MNIST.read_bytes(), providers=["CPUExecutionProvider"])
    inputs, outputs = data_sets(MNIST.parent)[0]
    (got,) = sess.run(None, {sess.get_inputs()[0].name: inputs[0][1]})
    assert_matches(got, outputs[0][1], "mnist_cnn from bytes")


def test_inputs_in_any_memory_order_are_taken():
    sess = vkml.InferenceSession(str(MNIST), providers=["CPUExecutionProvider"])
    inputs, outputs = data_sets(MNIST.parent)[0]
    x = inputs[0][1]
    name = sess.get_inputs()[0].name
    # The same values in Fortran order, and as a view taking every other element.
    fortran = np.asfortranarray(x)
    every_other = np.repeat(x, 2, axis=3)[..., ::2]
    assert not fortran.flags["C_CONTIGUOUS"] and not every_other.flags["C_CONTIGUOUS"]
    # And C-contiguous but one byte off the floats' alignment.
    misaligned = np.frombuffer(bytearray(x.nbytes + 1), dtype=x.dtype, count=x.size,
                               offset=1).reshape(x.shape)
    misaligned[...] = x
    assert not misaligned.flags["ALIGNED"] and misaligned.flags["C_CONTIGUOUS"]
    for what, value in [("Fortran-order", fortran), ("strided", every_other),
                        ("misaligned", misaligned)]:
        (got,) = sess.run(None, {name: value})
        assert_matches(got, outputs[0][1], f"{what} input")


def address(array):
    return array.__array_interface__["data"][0]


def test_contiguous_aligned_inputs_are_lent_not_copied():
    from vkml import _vkml

    for dtype in (np.float32, np.float16, np.int64, np.uint8):
        x = np.arange(4096).astype(dtype).reshape(64, 64)
        assert _vkml._input_address(x) == address(x), dtype
        # A C-contiguous view into another array is lent too: it keeps its base alive.
        assert _vkml._input_address(x[8:]) == address(x[8:]), dtype
        # Copied: not C-contiguous, or not aligned for the element type.
        for other in (x[:, ::2], np.asfortranarray(x)):
            assert _vkml._input_address(other) != address(other), dtype
    odd = np.frombuffer(bytearray(4 * 1000 + 1), dtype=np.float32, count=1000, offset=1)
    assert address(odd) % 4 != 0
    assert _vkml._input_address(odd) != address(odd)


def test_a_lent_input_is_read_now_and_not_kept(providers):
    # A Reshape whose shape is an input: its values decide the plan, which a session keeps.
    # Writing the same array between runs must give a new plan, not the kept one.
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = vkml.InferenceSession(model.SerializeToString(), providers=providers)
    x = np.arange(12, dtype=np.float32)
    shape = np.array([2, 6], dtype=np.int64)
    (y,) = sess.run(None, {"x": x, "shape": shape})
    assert y.shape == (2, 6)
    shape[:] = [3, 4]
    x *= 2
    (y,) = sess.run(None, {"x": x, "shape": shape})
    assert y.shape == (3, 4)
    np.testing.assert_array_equal(y, (2 * np.arange(12, dtype=np.float32)).reshape(3, 4))
    shape[:] = [2, 6]
    (y,) = sess.run(None, {"x": x, "shape": shape})
    assert y.shape == (2, 6)


def test_errors_raise_the_runtime_s_exceptions():
    with pytest.raises(vkml.InvalidModel, match="truncated|decode|parse|read"):
        vkml.InferenceSession(str(MALFORMED / "truncated.onnx"))
    with pytest.raises(vkml.InvalidModel):
        vkml.InferenceSession(str(MALFORMED / "no_such_model.onnx"))
    with pytest.raises(vkml.UnsupportedOp):
        vkml.InferenceSession(str(MALFORMED / "unsupported_op.onnx"),
                              providers=["CPUExecutionProvider"]).run(None, {})
    sess = vkml.InferenceSession(str(MNIST), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    good = data_sets(MNIST.parent)[0][0][0][1]
    with pytest.raises(vkml.InvalidInput, match="no input named 'nope'"):
        sess.run(None, {"nope": good})
    with pytest.raises(vkml.InvalidInput, match="missing input"):
        sess.run(None, {})
    with pytest.raises(vkml.InvalidInput, match="no output named 'nope'"):
        sess.run(["nope"], {name: good})
    with pytest.raises(vkml.InvalidInput):
        sess.run(None, {name: good.astype(np.int32)})
    with pytest.raises(vkml.InvalidInput):
        sess.run(None, {name: good[:, :, :10]})
    with pytest.raises(vkml.InvalidInput, match="dtype"):
        sess.run(None, {name: good.astype(np.complex64)})
    # Every one is a VkmlError.
    assert issubclass(vkml.InvalidInput, vkml.VkmlError)
    assert issubclass(vkml.VkmlError, Exception)


def test_threads_share_one_session(providers):
    sess = vkml.InferenceSession(str(MNIST), providers=providers)
    sets = data_sets(MNIST.parent)
    name = sess.get_inputs()[0].name

    def work(t):
        for i in range(20):
            inputs, outputs = sets[(t + i) % len(sets)]
            (got,) = sess.run(None, {name: inputs[0][1]})
            assert_matches(got, outputs[0][1], f"thread {t} run {i}")

    failures = in_threads(8, work)
    assert not failures, failures[:3]


def test_vkml_config_entries_set_the_runtime_s_settings(providers):
    sets = data_sets(MNIST.parent)
    inputs, outputs = sets[0]
    # Runs armed behind the GPU's gate (the default) or not, same outputs.
    for arm in ("1", "0"):
        so = vkml.SessionOptions()
        so.add_session_config_entry("vkml.arm", arm)
        assert so.get_session_config_entry("vkml.arm") == arm
        sess = vkml.InferenceSession(str(MNIST), sess_options=so, providers=providers)
        assert sess.get_session_options() is so
        (got,) = sess.run(None, {sess.get_inputs()[0].name: inputs[0][1]})
        assert_matches(got, outputs[0][1], f"vkml.arm={arm}")
    # A setting reaches the runtime: no value may take more than 1 byte, so none fits.
    so = vkml.SessionOptions()
    so.add_session_config_entry("vkml.max_value_bytes", "1")
    with pytest.raises(vkml.VkmlError, match=" 1 bytes"):
        sess = vkml.InferenceSession(str(MNIST), sess_options=so, providers=providers)
        sess.run(None, {sess.get_inputs()[0].name: inputs[0][1]})
    # Other entries are kept and change nothing; a vkml name that is no setting is refused,
    # a value the setting does not understand warned about.
    so = vkml.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    vkml.InferenceSession(str(MNIST), sess_options=so, providers=providers)
    with pytest.raises(KeyError, match="no config entry"):
        so.get_session_config_entry("vkml.arm")
    so.add_session_config_entry("vkml.no_such_thing", "1")
    with pytest.raises(vkml.InvalidInput, match="vkml.no_such_thing is no VKML setting.*vkml.arm"):
        vkml.InferenceSession(str(MNIST), sess_options=so, providers=providers)
    so = vkml.SessionOptions()
    so.add_session_config_entry("vkml.fusion", "sometimes")
    with pytest.warns(UserWarning, match="VKML_FUSION"):
        vkml.InferenceSession(str(MNIST), sess_options=so, providers=providers)
