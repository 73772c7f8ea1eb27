"""Shared plumbing for the fixture generator: building models, running onnxruntime, and writing
ONNX's test layout (model.onnx + test_data_set_<k>/input_<i>.pb, output_<j>.pb)."""

import os
import zlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# ir_version 8 is read by every onnxruntime of the last years and covers the opsets used here.
IR_VERSION = 8
DEFAULT_OPSET = 13

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def rng_for(name):
    """A generator seeded by the fixture's name, so adding a fixture never changes another."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def value_info(name, dtype, shape):
    return helper.make_tensor_value_info(name, NP_TO_ONNX[np.dtype(dtype)], shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name=name)


MS_DOMAIN = "com.microsoft"


def make_model(name, nodes, inputs, outputs, initializers=(), opset=DEFAULT_OPSET, check=True):
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    imports = [helper.make_opsetid("", opset)]
    # onnxruntime's contrib ops (one version each): imported when a node uses them.
    if any(n.domain == MS_DOMAIN for n in nodes):
        imports.append(helper.make_opsetid(MS_DOMAIN, 1))
    model = helper.make_model(
        graph,
        opset_imports=imports,
        producer_name="vkml-fixtures",
        ir_version=IR_VERSION,
    )
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def session_for(model_or_path):
    opts = ort.SessionOptions()
    # Unoptimised graph and one thread: the reference is the plain op-by-op semantics, and it
    # comes out bit-identical on every regeneration.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    src = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])


def run_reference(model_or_path, feeds):
    sess = session_for(model_or_path)
    names = [o.name for o in sess.get_outputs()]
    return list(zip(names, sess.run(names, feeds)))


def check_not_degenerate(fixture, outputs):
    for name, arr in outputs:
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)):
                raise SystemExit(f"{fixture}: output {name} has non-finite values")
            if arr.size > 1 and float(np.std(arr)) == 0.0:
                raise SystemExit(f"{fixture}: output {name} is constant")


def write_tensor(path, name, array):
    tensor = numpy_helper.from_array(np.asarray(array), name=name)
    with open(path, "wb") as f:
        f.write(tensor.SerializeToString())


def write_data_set(fixture_dir, index, feeds, outputs):
    d = os.path.join(fixture_dir, f"test_data_set_{index}")
    os.makedirs(d, exist_ok=True)
    for i, (name, arr) in enumerate(feeds.items()):
        write_tensor(os.path.join(d, f"input_{i}.pb"), name, arr)
    for j, (name, arr) in enumerate(outputs):
        write_tensor(os.path.join(d, f"output_{j}.pb"), name, arr)


def save_fixture(root, name, model, feed_sets):
    """Writes model.onnx and one test data set per entry of `feed_sets` (dicts name -> array,
    in the graph's input order), with onnxruntime's outputs as the reference."""
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    onnx.save_model(model, os.path.join(d, "model.onnx"))
    for k, feeds in enumerate(feed_sets):
        outputs = run_reference(model, feeds)
        check_not_degenerate(name, outputs)
        write_data_set(d, k, feeds, outputs)
    return d
