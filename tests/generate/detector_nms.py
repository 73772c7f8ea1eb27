#!/usr/bin/env python3
"""`tests/models/yolo_nms`: the `yolo_static` detector with the post-processing exporters
append (Ultralytics' `nms=True`, torchvision's `nms` through the TorchScript exporter):
class scores times objectness, NonMaxSuppression over center-format boxes, and the kept boxes
and scores gathered, with onnxruntime's outputs as the reference.

Needs onnx==1.22.0, onnxruntime and numpy; reads tests/models/yolo_static (generate_models.py).
"""

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import common  # noqa: E402
from quantized_models import inputs_of  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(REPO, "tests", "models")


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype), name=name)


def main():
    model = onnx.load(os.path.join(MODELS, "yolo_static", "model.onnx"))
    g = model.graph
    det = g.output[0].name
    nodes = [
        helper.make_node("Slice", [det, "s0", "s4", "ax2"], ["boxes"], name="nms_boxes"),
        helper.make_node("Slice", [det, "s4", "s5", "ax2"], ["objectness"], name="nms_obj"),
        helper.make_node("Slice", [det, "s5", "s_end", "ax2"], ["class_probs"], name="nms_cls"),
        helper.make_node("Mul", ["class_probs", "objectness"], ["scores_nc"], name="nms_mul"),
        helper.make_node("Transpose", ["scores_nc"], ["scores"], name="nms_transpose", perm=[0, 2, 1]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "min_score"],
                         ["selected"], name="nms", center_point_box=1),
        helper.make_node("Gather", ["selected", "batch_and_box"], ["where"], name="nms_where", axis=1),
        helper.make_node("GatherND", ["boxes", "where"], ["kept_boxes"], name="nms_kept_boxes"),
        helper.make_node("GatherND", ["scores", "selected"], ["kept_scores"], name="nms_kept_scores"),
    ]
    g.node.extend(nodes)
    g.initializer.extend([
        const("s0", [0]), const("s4", [4]), const("s5", [5]), const("s_end", [2**62]), const("ax2", [2]),
        const("max_out", [20]), const("iou", [0.45], np.float32), const("min_score", [0.26], np.float32),
        const("batch_and_box", [0, 2]),
    ])
    del g.output[:]
    g.output.extend([
        helper.make_tensor_value_info("selected", TensorProto.INT64, ["kept", 3]),
        helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, ["kept", 4]),
        helper.make_tensor_value_info("kept_scores", TensorProto.FLOAT, ["kept"]),
    ])
    onnx.checker.check_model(model, full_check=True)
    d = os.path.join(MODELS, "yolo_nms")
    if os.path.isdir(d):
        shutil.rmtree(d)
    sets = inputs_of("yolo_static")
    common.save_fixture(MODELS, "yolo_nms", model, sets)
    for k, feeds in enumerate(sets):
        kept = common.run_reference(model, feeds)[0][1]
        print(f"yolo_nms data set {k}: {len(kept)} boxes kept")


if __name__ == "__main__":
    main()
