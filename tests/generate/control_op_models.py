"""Control flow over real compute, as one model (fixture `control_flow`):

- a Scan that runs an Elman RNN over the rows of x (state h, h' = tanh(h V + x_t U + b)),
  its body reading U, V and b from the outer graph;
- a Loop applying a residual block y' = y + relu(y W + c) three times to the Scan's outputs
  (trip count and condition initializers), stacking each iteration's row sums;
- an If on a computed condition (the mean of the Loop's result above zero) choosing between a
  Softmax head and a Sigmoid head.

Registered into op_models.FIXTURES on import."""

import numpy as np
from onnx import TensorProto, helper

from op_models import F32, Spec, fixture, randn


def graph(name, nodes, inputs, outputs, inits=()):
    return helper.make_graph(nodes, name, inputs, outputs, list(inits))


def vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def mk(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=f"{op.lower()}_{outs[0]}", **attrs)


@fixture("control_flow")
def _(rng):
    rows, dim, classes = 6, 8, 5
    inits = {
        "u": randn(rng, dim, dim, scale=0.4), "v": randn(rng, dim, dim, scale=0.4),
        "b": randn(rng, dim, scale=0.1), "h0": np.zeros(dim, F32),
        "w": randn(rng, dim, dim, scale=0.3), "c": randn(rng, dim, scale=0.1),
        "trips": np.array(3, np.int64), "go": np.array(True),
        "head_a": randn(rng, dim, classes, scale=0.5), "head_b": randn(rng, dim, classes, scale=0.5),
        "zero": np.array(0.0, F32),
    }
    scan_body = graph("rnn_step", [
        mk("MatMul", ["h_in", "v"], ["hv"]), mk("MatMul", ["x_t", "u"], ["xu"]),
        mk("Add", ["hv", "xu"], ["s1"]), mk("Add", ["s1", "b"], ["s2"]),
        mk("Tanh", ["s2"], ["h_out"]), mk("Identity", ["h_out"], ["y_t"]),
    ], [vi("h_in", shape=[dim]), vi("x_t", shape=[dim])], [vi("h_out", shape=[dim]), vi("y_t", shape=[dim])])
    loop_body = graph("residual", [
        mk("MatMul", ["y_in", "w"], ["yw"]), mk("Add", ["yw", "c"], ["yc"]), mk("Relu", ["yc"], ["r"]),
        mk("Add", ["y_in", "r"], ["y_out"]), mk("ReduceSum", ["y_out", "one"], ["sum"], keepdims=0),
        mk("Identity", ["cond_in"], ["cond_out"]),
    ], [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("y_in", shape=[rows, dim])],
        [vi("cond_out", TensorProto.BOOL, []), vi("y_out", shape=[rows, dim]), vi("sum", shape=[rows])],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    then_g = graph("softmax_head", [mk("MatMul", ["y", "head_a"], ["ta"]), mk("Softmax", ["ta"], ["p"], axis=-1)],
                   [], [vi("p", shape=[rows, classes])])
    else_g = graph("sigmoid_head", [mk("MatMul", ["y", "head_b"], ["tb"]), mk("Sigmoid", ["tb"], ["q"])],
                   [], [vi("q", shape=[rows, classes])])
    nodes = [
        mk("Scan", ["h0", "x"], ["h_last", "hs"], body=scan_body, num_scan_inputs=1),
        mk("Loop", ["trips", "go", "hs"], ["y", "sums"], body=loop_body),
        mk("ReduceMean", ["y"], ["m"], keepdims=0),
        mk("Greater", ["m", "zero"], ["pos"]),
        mk("If", ["pos"], ["head"], then_branch=then_g, else_branch=else_g),
    ]
    return Spec(nodes, {"x": randn(rng, rows, dim)}, inits, outputs=("head", "sums", "h_last"))
