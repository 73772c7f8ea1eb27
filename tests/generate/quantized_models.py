#!/usr/bin/env python3
"""Quantized forms of three of tests/models/'s families, made with onnxruntime.quantization as
users make them, with onnxruntime's outputs as the reference:

- `resnet_qdq`, `mobilenetv2_qdq`: the `_static` ResNet and MobileNetV2 statically quantized
  to QDQ (uint8 activations, int8 weights per channel, MinMax calibration on 16 random
  images), opset 13;
- `bert_int8_dynamic`: the `_static` BERT dynamically quantized (int8 weights;
  DynamicQuantizeLinear and MatMulInteger at run time).

The references come from onnxruntime with its graph optimisations on (one thread), so Q/DQ
pairs run as its int8 kernels (QLinearConv, QLinearMatMul...) exactly as a user's session
runs them. tests/models.rs compares with the tolerance stated there.

Needs onnx==1.22.0, onnxruntime and numpy; reads tests/models/<family>_static (written by
generate_models.py) and rewrites only the folders above.
"""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import numpy_helper, version_converter  # noqa: E402
from onnxruntime.quantization import (  # noqa: E402
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

import common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(REPO, "tests", "models")


class Images(CalibrationDataReader):
    def __init__(self, name, shape, count=16):
        rng = common.rng_for(name + "/calibration")
        self.batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self.batches, None)


def reference(model_path, feeds):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return list(zip(names, sess.run(names, feeds)))


def save(name, model_path, feed_sets):
    d = os.path.join(MODELS, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model = onnx.load(model_path)
    model.producer_name = "vkml-models (onnxruntime.quantization " + ort.__version__ + ")"
    onnx.save_model(model, os.path.join(d, "model.onnx"))
    for k, feeds in enumerate(feed_sets):
        outputs = reference(os.path.join(d, "model.onnx"), feeds)
        common.check_not_degenerate(name, outputs)
        common.write_data_set(d, k, feeds, outputs)
    ops = sorted({n.op_type for n in model.graph.node})
    size = os.path.getsize(os.path.join(d, "model.onnx"))
    print(f"{name}: {size / 1024:.0f} KiB, {len(ops)} op types: {' '.join(ops)}")


def inputs_of(family):
    """The data sets' inputs of tests/models/<family>, by graph input name."""
    d = os.path.join(MODELS, family)
    sets = []
    for k in range(2):
        s = os.path.join(d, f"test_data_set_{k}")
        feeds = {}
        for f in sorted(os.listdir(s)):
            if f.startswith("input_"):
                t = onnx.TensorProto()
                with open(os.path.join(s, f), "rb") as fh:
                    t.ParseFromString(fh.read())
                feeds[t.name] = numpy_helper.to_array(t)
        sets.append(feeds)
    return sets


def qdq(family, tmp):
    src = onnx.load(os.path.join(MODELS, f"{family}_static", "model.onnx"))
    # Per-channel DequantizeLinear (its axis) is opset 13.
    if src.opset_import[0].version < 13:
        src = version_converter.convert_version(src, 13)
    f32 = os.path.join(tmp, f"{family}.onnx")
    onnx.save_model(src, f32)
    out = os.path.join(tmp, f"{family}_qdq.onnx")
    shape = [d.dim_value for d in src.graph.input[0].type.tensor_type.shape.dim]
    quantize_static(f32, out, Images(family, shape), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    save(f"{family}_qdq", out, inputs_of(f"{family}_static"))


def main():
    ort.set_default_logger_severity(3)
    with tempfile.TemporaryDirectory() as tmp:
        qdq("resnet", tmp)
        qdq("mobilenetv2", tmp)
        out = os.path.join(tmp, "bert_int8.onnx")
        quantize_dynamic(os.path.join(MODELS, "bert_static", "model.onnx"), out, weight_type=QuantType.QInt8)
        save("bert_int8_dynamic", out, inputs_of("bert_static"))


if __name__ == "__main__":
    main()
