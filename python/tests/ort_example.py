"""A short script written for onnxruntime: load a model, look at its inputs, run it, compare
with the expected output. test_ort_script.py runs it with only its import line changed."""

import sys

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper, TensorProto


def load(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


model, data = sys.argv[1], sys.argv[2]
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
sess = ort.InferenceSession(model, sess_options=options, providers=ort.get_available_providers())
inp = sess.get_inputs()[0]
print(f"input {inp.name} {inp.shape} {inp.type} on {sess.get_providers()}")
x = load(f"{data}/input_0.pb")
y = sess.run([sess.get_outputs()[0].name], {inp.name: x})[0]
want = load(f"{data}/output_0.pb")
np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
print("matches")
