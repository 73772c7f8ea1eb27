"""One small model per op and attribute variant: tests/fixtures/op_<op>_<variant>/."""

import numpy as np
from onnx import helper

from common import MS_DOMAIN, NP_TO_ONNX, init, make_model, run_reference, rng_for, save_fixture, value_info

F32 = np.float32
FIXTURES = {}


def fixture(name):
    def register(fn):
        FIXTURES[name] = fn
        return fn

    return register


class Spec:
    """What a fixture function returns: nodes, fed inputs (graph inputs, in order), weights
    (initializers), outputs and their dtypes, and the opset. `check=False` skips onnx's model
    checker, for onnxruntime's contrib ops that it does not know."""

    def __init__(self, nodes, feeds, inits=None, outputs=("y",), out_dtypes=None, opset=13, check=True):
        self.nodes = nodes if isinstance(nodes, list) else [nodes]
        # onnx's checker knows no com.microsoft op: their models skip it.
        self.check = check
        self.feeds = feeds
        self.inits = inits or {}
        self.outputs = list(outputs)
        self.out_dtypes = out_dtypes or {}
        self.opset = opset


def build(name, spec):
    inputs = [value_info(k, v.dtype, list(v.shape)) for k, v in spec.feeds.items()]
    inits = [init(k, v) for k, v in spec.inits.items()]

    def outs(shapes):
        return [helper.make_tensor_value_info(o, NP_TO_ONNX[np.dtype(spec.out_dtypes.get(o, F32))],
                                              shapes.get(o)) for o in spec.outputs]

    # Declare the outputs' shapes as onnxruntime computes them: the runtime under test gets a
    # fully typed graph, as exporters write.
    draft = make_model(name, spec.nodes, inputs, outs({}), inits, spec.opset, check=False)
    shapes = {n: list(a.shape) for n, a in run_reference(draft, spec.feeds)}
    return make_model(name, spec.nodes, inputs, outs(shapes), inits, spec.opset, check=spec.check)


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"{op.lower()}_node", **attrs)


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


# ---- elementwise binary, with numpy broadcasting ----

def binary(op, a_shape, b_shape, b_init=False, nonzero_b=False):
    def make(rng):
        a = randn(rng, *a_shape)
        b = randn(rng, *b_shape)
        if nonzero_b:
            # Divisors bounded away from zero: quotients stay moderate.
            b = (np.sign(b) + (b == 0)) * rng.uniform(0.5, 2.0, size=b.shape).astype(F32)
            b = b.astype(F32)
        if b_init:
            return Spec(node(op, ["a", "b"]), {"a": a}, {"b": b})
        return Spec(node(op, ["a", "b"]), {"a": a, "b": b})

    return make


for _op in ("Add", "Sub", "Mul", "Div"):
    _nz = _op == "Div"
    _l = _op.lower()
    FIXTURES[f"op_{_l}_same_shape"] = binary(_op, (2, 3, 4), (2, 3, 4), nonzero_b=_nz)
    FIXTURES[f"op_{_l}_broadcast_trailing"] = binary(_op, (2, 3, 4), (4,), nonzero_b=_nz)
    FIXTURES[f"op_{_l}_broadcast_both"] = binary(_op, (2, 1, 4), (3, 1), nonzero_b=_nz)
    FIXTURES[f"op_{_l}_scalar_const"] = binary(_op, (3, 5), (), b_init=True, nonzero_b=_nz)
FIXTURES["op_add_broadcast_channel_const"] = binary("Add", (2, 3, 4, 5), (3, 1, 1), b_init=True)
FIXTURES["op_mul_broadcast_leading"] = binary("Mul", (4,), (2, 3, 4))


# ---- unary activations ----

for _op in ("Relu", "Sigmoid", "Tanh"):
    FIXTURES[f"op_{_op.lower()}"] = (lambda op: lambda rng: Spec(
        node(op, ["x"]), {"x": randn(rng, 2, 3, 5, scale=3.0)}))(_op)


# ---- MatMul ----

def matmul(a_shape, b_shape, b_init=False):
    def make(rng):
        a, b = randn(rng, *a_shape), randn(rng, *b_shape)
        if b_init:
            return Spec(node("MatMul", ["a", "b"]), {"a": a}, {"b": b})
        return Spec(node("MatMul", ["a", "b"]), {"a": a, "b": b})

    return make


FIXTURES["op_matmul_2d"] = matmul((3, 4), (4, 5), b_init=True)
FIXTURES["op_matmul_batched"] = matmul((2, 3, 4), (2, 4, 5))
FIXTURES["op_matmul_broadcast_batch"] = matmul((2, 1, 3, 4), (3, 4, 5))
FIXTURES["op_matmul_broadcast_weight"] = matmul((2, 3, 6), (6, 4), b_init=True)
FIXTURES["op_matmul_vector_matrix"] = matmul((4,), (4, 5))
FIXTURES["op_matmul_matrix_vector"] = matmul((2, 3, 4), (4,))
FIXTURES["op_matmul_large"] = matmul((37, 70), (70, 45), b_init=True)


# ---- Gemm ----

def gemm(m, k, n, c_shape=(None,), trans_a=0, trans_b=0, alpha=None, beta=None):
    def make(rng):
        a = randn(rng, *((k, m) if trans_a else (m, k)))
        b = randn(rng, *((n, k) if trans_b else (k, n)))
        attrs = {}
        if trans_a:
            attrs["transA"] = 1
        if trans_b:
            attrs["transB"] = 1
        if alpha is not None:
            attrs["alpha"] = alpha
        if beta is not None:
            attrs["beta"] = beta
        inits = {"b": b}
        ins = ["a", "b"]
        if c_shape != (None,):
            inits["c"] = randn(rng, *c_shape)
            ins.append("c")
        return Spec(node("Gemm", ins, **attrs), {"a": a}, inits)

    return make


FIXTURES["op_gemm_bias_row"] = gemm(3, 4, 5, c_shape=(5,))
FIXTURES["op_gemm_no_bias"] = gemm(3, 4, 5)
FIXTURES["op_gemm_trans_a"] = gemm(3, 4, 5, c_shape=(5,), trans_a=1)
FIXTURES["op_gemm_trans_b"] = gemm(3, 4, 5, c_shape=(5,), trans_b=1)
FIXTURES["op_gemm_trans_ab"] = gemm(3, 4, 5, c_shape=(1, 5), trans_a=1, trans_b=1)
FIXTURES["op_gemm_alpha_beta_full_c"] = gemm(3, 4, 5, c_shape=(3, 5), alpha=0.5, beta=2.0)
FIXTURES["op_gemm_bias_column"] = gemm(3, 4, 5, c_shape=(3, 1), beta=0.25)
FIXTURES["op_gemm_bias_scalar"] = gemm(3, 4, 5, c_shape=(), alpha=-1.5)
FIXTURES["op_gemm_large"] = gemm(33, 130, 65, c_shape=(65,), trans_b=1)


# ---- Conv ----

def conv(x_shape, w_shape, bias=True, **attrs):
    def make(rng):
        fan_in = int(np.prod(w_shape[1:]))
        x = randn(rng, *x_shape)
        w = randn(rng, *w_shape, scale=float(np.sqrt(2.0 / fan_in)))
        inits = {"w": w}
        ins = ["x", "w"]
        if bias:
            inits["bias"] = randn(rng, w_shape[0], scale=0.1)
            ins.append("bias")
        return Spec(node("Conv", ins, **attrs), {"x": x}, inits)

    return make


FIXTURES["op_conv_basic_pads"] = conv((1, 3, 7, 7), (4, 3, 3, 3), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
FIXTURES["op_conv_no_bias"] = conv((2, 2, 6, 5), (3, 2, 3, 3), bias=False)
FIXTURES["op_conv_1x1"] = conv((1, 8, 4, 4), (5, 8, 1, 1))
FIXTURES["op_conv_strides"] = conv((1, 3, 9, 8), (4, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
FIXTURES["op_conv_strides_asymmetric"] = conv((1, 2, 10, 9), (3, 2, 3, 2), strides=[3, 2])
FIXTURES["op_conv_dilations"] = conv((1, 2, 9, 9), (3, 2, 3, 3), dilations=[2, 2], pads=[2, 2, 2, 2])
FIXTURES["op_conv_pads_asymmetric"] = conv((1, 2, 6, 6), (3, 2, 3, 3), pads=[0, 1, 2, 1])
FIXTURES["op_conv_rect_kernel"] = conv((1, 2, 7, 6), (3, 2, 3, 2), pads=[1, 0, 1, 1])
FIXTURES["op_conv_groups"] = conv((1, 4, 6, 6), (6, 2, 3, 3), group=2, pads=[1, 1, 1, 1])
FIXTURES["op_conv_depthwise"] = conv((2, 4, 6, 6), (4, 1, 3, 3), group=4, pads=[1, 1, 1, 1])
FIXTURES["op_conv_depthwise_multiplier"] = conv((1, 3, 5, 5), (6, 1, 3, 3), group=3, strides=[2, 2])
FIXTURES["op_conv_auto_pad_same_upper"] = conv((1, 2, 8, 7), (3, 2, 4, 3), auto_pad="SAME_UPPER", strides=[2, 2])
FIXTURES["op_conv_auto_pad_same_lower"] = conv((1, 2, 8, 7), (3, 2, 4, 3), auto_pad="SAME_LOWER", strides=[2, 2])
FIXTURES["op_conv_auto_pad_valid"] = conv((1, 2, 8, 7), (3, 2, 3, 3), auto_pad="VALID", strides=[2, 1])
FIXTURES["op_conv_large"] = conv((1, 16, 20, 20), (32, 16, 3, 3), pads=[1, 1, 1, 1])


def fused_conv(x_shape, w_shape, activation=None, params=None, bias=True, z=False, **attrs):
    """com.microsoft FusedConv (onnxruntime's Conv + activation, and + Z before it)."""

    def make(rng):
        spec = conv(x_shape, w_shape, bias=bias, **attrs)(rng)
        ins = ["x", "w", "bias" if bias else ""]
        if z:
            # Z has the output's shape: onnxruntime's own run of the plain Conv says which.
            draft = make_model("z", [node("Conv", ins[:2], **attrs)], [value_info("x", F32, list(x_shape))],
                               [helper.make_tensor_value_info("y", NP_TO_ONNX[np.dtype(F32)], None)],
                               [init("w", spec.inits["w"])], spec.opset, check=False)
            y_shape = dict(run_reference(draft, {"x": spec.feeds["x"]}))["y"].shape
            spec.feeds["z"] = randn(rng, *y_shape)
            ins.append("z")
        while ins[-1] == "":
            ins.pop()
        act = {} if activation is None else {"activation": activation}
        if params is not None:
            act["activation_params"] = params
        n = helper.make_node("FusedConv", ins, ["y"], name="fusedconv_node", domain=MS_DOMAIN, **attrs, **act)
        return Spec(n, spec.feeds, spec.inits, check=False)

    return make


FIXTURES["op_fusedconv_relu"] = fused_conv((1, 3, 7, 7), (4, 3, 3, 3), "Relu", pads=[1, 1, 1, 1])
FIXTURES["op_fusedconv_leakyrelu_z"] = fused_conv((2, 4, 6, 5), (5, 4, 3, 3), "LeakyRelu", [0.1], z=True,
                                                  pads=[1, 1, 1, 1])
FIXTURES["op_fusedconv_clip_strided_no_bias"] = fused_conv((1, 3, 9, 8), (4, 3, 3, 3), "Clip", [-0.5, 0.4],
                                                           bias=False, strides=[2, 2], pads=[1, 0, 1, 1])
FIXTURES["op_fusedconv_sigmoid_groups"] = fused_conv((1, 4, 6, 6), (6, 2, 3, 3), "Sigmoid", group=2)
FIXTURES["op_fusedconv_hardsigmoid_depthwise"] = fused_conv((1, 4, 6, 6), (4, 1, 3, 3), "HardSigmoid", [0.3, 0.4],
                                                            group=4, pads=[1, 1, 1, 1])
FIXTURES["op_fusedconv_tanh_z_no_bias"] = fused_conv((1, 8, 5, 5), (6, 8, 1, 1), "Tanh", bias=False, z=True)
FIXTURES["op_fusedconv_relu_z_large"] = fused_conv((1, 16, 20, 20), (32, 16, 3, 3), "Relu", z=True, pads=[1, 1, 1, 1])
FIXTURES["op_fusedconv_z_only"] = fused_conv((1, 3, 7, 7), (4, 3, 3, 3), z=True, pads=[1, 1, 1, 1])


# ---- pooling ----

def pool(op, x_shape, negative=False, **attrs):
    def make(rng):
        x = randn(rng, *x_shape)
        if negative:
            # All negative: a max pool that pads with zeros instead of -inf shows it.
            x = -np.abs(x) - 0.1
        return Spec(node(op, ["x"], **attrs), {"x": x.astype(F32)})

    return make


FIXTURES["op_maxpool_2x2"] = pool("MaxPool", (1, 3, 8, 8), kernel_shape=[2, 2], strides=[2, 2])
FIXTURES["op_maxpool_pads_negative"] = pool("MaxPool", (1, 2, 5, 5), negative=True, kernel_shape=[3, 3],
                                            pads=[1, 1, 1, 1])
FIXTURES["op_maxpool_strides_overlap"] = pool("MaxPool", (2, 2, 9, 7), kernel_shape=[3, 3], strides=[2, 2])
FIXTURES["op_maxpool_ceil_mode"] = pool("MaxPool", (1, 2, 8, 8), negative=True, kernel_shape=[3, 3],
                                        strides=[2, 2], ceil_mode=1)
FIXTURES["op_maxpool_auto_pad_same_upper"] = pool("MaxPool", (1, 2, 7, 6), negative=True, kernel_shape=[3, 2],
                                                  strides=[2, 2], auto_pad="SAME_UPPER")
FIXTURES["op_averagepool_2x2"] = pool("AveragePool", (1, 3, 8, 8), kernel_shape=[2, 2], strides=[2, 2])
FIXTURES["op_averagepool_pads_exclude"] = pool("AveragePool", (1, 2, 5, 5), kernel_shape=[3, 3],
                                               pads=[1, 1, 1, 1])
FIXTURES["op_averagepool_pads_include"] = pool("AveragePool", (1, 2, 5, 5), kernel_shape=[3, 3],
                                               pads=[1, 1, 1, 1], count_include_pad=1)
FIXTURES["op_averagepool_ceil_mode"] = pool("AveragePool", (1, 2, 8, 8), kernel_shape=[3, 3], strides=[2, 2],
                                            ceil_mode=1)
FIXTURES["op_averagepool_ceil_mode_pads_include"] = pool("AveragePool", (1, 2, 7, 7), kernel_shape=[3, 3],
                                                         strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                                         count_include_pad=1)
FIXTURES["op_averagepool_auto_pad_same_upper"] = pool("AveragePool", (1, 2, 7, 6), kernel_shape=[3, 3],
                                                      strides=[2, 2], auto_pad="SAME_UPPER")
FIXTURES["op_globalaveragepool"] = pool("GlobalAveragePool", (2, 3, 5, 4))


# ---- BatchNormalization ----

def batchnorm(x_shape, **attrs):
    def make(rng):
        c = x_shape[1]
        inits = {
            "scale": rng.uniform(0.5, 1.5, c).astype(F32),
            "bias": randn(rng, c, scale=0.2),
            "mean": randn(rng, c, scale=0.5),
            "var": rng.uniform(0.2, 2.0, c).astype(F32),
        }
        return Spec(node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], **attrs),
                    {"x": randn(rng, *x_shape)}, inits)

    return make


FIXTURES["op_batchnormalization_4d"] = batchnorm((2, 3, 4, 5))
FIXTURES["op_batchnormalization_epsilon"] = batchnorm((1, 4, 3, 3), epsilon=0.1)
FIXTURES["op_batchnormalization_2d"] = batchnorm((5, 6))


# ---- Softmax: opset 11 flattens to 2-D at `axis`, opset 13 normalises along `axis` alone ----

def softmax(x_shape, opset, **attrs):
    return lambda rng: Spec(node("Softmax", ["x"], **attrs), {"x": randn(rng, *x_shape, scale=1.5)},
                            opset=opset)


FIXTURES["op_softmax_opset11_default_axis"] = softmax((2, 3, 4), 11)
FIXTURES["op_softmax_opset11_axis2"] = softmax((2, 3, 4), 11, axis=2)
FIXTURES["op_softmax_opset11_axis0"] = softmax((2, 3), 11, axis=0)
FIXTURES["op_softmax_opset13_default_axis"] = softmax((2, 3, 4), 13)
FIXTURES["op_softmax_opset13_axis1"] = softmax((2, 3, 4), 13, axis=1)
FIXTURES["op_softmax_opset13_axis_negative"] = softmax((2, 3, 4), 13, axis=-3)
FIXTURES["op_softmax_wide"] = softmax((3, 1000), 13)


# ---- Reshape, Flatten, Transpose, Concat, Identity ----

def reshape(x_shape, target):
    return lambda rng: Spec(node("Reshape", ["x", "shape"]), {"x": randn(rng, *x_shape)},
                            {"shape": np.array(target, np.int64)})


FIXTURES["op_reshape_explicit"] = reshape((2, 3, 4), [4, 6])
FIXTURES["op_reshape_infer_dim"] = reshape((2, 3, 4), [3, -1])
FIXTURES["op_reshape_keep_dim_zero"] = reshape((2, 3, 4), [0, 4, 3])
FIXTURES["op_reshape_zero_and_infer"] = reshape((2, 3, 4), [0, -1])


def flatten(x_shape, **attrs):
    return lambda rng: Spec(node("Flatten", ["x"], **attrs), {"x": randn(rng, *x_shape)})


FIXTURES["op_flatten_default_axis"] = flatten((2, 3, 4, 5))
FIXTURES["op_flatten_axis0"] = flatten((2, 3, 4), axis=0)
FIXTURES["op_flatten_axis2"] = flatten((2, 3, 4, 5), axis=2)
FIXTURES["op_flatten_axis_negative"] = flatten((2, 3, 4, 5), axis=-1)


def transpose(x_shape, **attrs):
    return lambda rng: Spec(node("Transpose", ["x"], **attrs), {"x": randn(rng, *x_shape)})


FIXTURES["op_transpose_2d"] = transpose((3, 7))
FIXTURES["op_transpose_default_reverse"] = transpose((2, 3, 4))
FIXTURES["op_transpose_nchw_to_nhwc"] = transpose((2, 3, 4, 5), perm=[0, 2, 3, 1])
FIXTURES["op_transpose_perm_3d"] = transpose((2, 3, 4), perm=[1, 0, 2])


def concat(shapes, axis, const_index=None):
    def make(rng):
        names = [f"x{i}" for i in range(len(shapes))]
        arrays = {n: randn(rng, *s) for n, s in zip(names, shapes)}
        inits = {}
        if const_index is not None:
            n = names[const_index]
            inits[n] = arrays.pop(n)
        return Spec(node("Concat", names, axis=axis), arrays, inits)

    return make


FIXTURES["op_concat_axis1"] = concat([(2, 1, 3), (2, 4, 3), (2, 2, 3)], 1)
FIXTURES["op_concat_axis0"] = concat([(1, 4), (3, 4)], 0)
FIXTURES["op_concat_axis_negative"] = concat([(2, 3, 2), (2, 3, 5)], -1)
FIXTURES["op_concat_with_constant"] = concat([(1, 2, 2, 2), (1, 3, 2, 2)], 1, const_index=1)

FIXTURES["op_identity"] = lambda rng: Spec([node("Identity", ["x"], ["i"]), node("Relu", ["i"])],
                                          {"x": randn(rng, 3, 4)})
FIXTURES["op_identity_graph_output"] = lambda rng: Spec(node("Identity", ["x"]), {"x": randn(rng, 2, 5)})


# ---- Constant ----

@fixture("op_constant_tensor")
def _(rng):
    c = helper.make_tensor("c", 1, [2, 3], randn(rng, 2, 3).flatten().tolist())
    return Spec([node("Constant", [], ["c"], value=c), helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                {"x": randn(rng, 2, 3)})


@fixture("op_constant_value_float")
def _(rng):
    return Spec([node("Constant", [], ["c"], value_float=2.5), helper.make_node("Mul", ["x", "c"], ["y"], name="mul")],
                {"x": randn(rng, 4)})


@fixture("op_constant_value_ints_as_shape")
def _(rng):
    return Spec([node("Constant", [], ["shape"], value_ints=[3, 8]),
                 helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                {"x": randn(rng, 2, 3, 4)})


@fixture("op_constant_graph_output")
def _(rng):
    c = helper.make_tensor("c", 7, [3], [4, -5, 6])
    # The graph's own input is unused by the constant; it is still declared and fed.
    return Spec([node("Constant", [], ["y"], value=c), helper.make_node("Relu", ["x"], ["r"], name="relu")],
                {"x": randn(rng, 6)}, outputs=("y", "r"), out_dtypes={"y": np.int64})


# ---- Shape ----

@fixture("op_shape")
def _(rng):
    return Spec(node("Shape", ["x"]), {"x": randn(rng, 2, 3, 4)}, out_dtypes={"y": np.int64})


@fixture("op_shape_start_end")
def _(rng):
    return Spec(node("Shape", ["x"], start=1, end=-1), {"x": randn(rng, 2, 3, 4, 5)},
                out_dtypes={"y": np.int64}, opset=15)


@fixture("op_shape_arithmetic_reshape")
def _(rng):
    # x.view(x.size(0), -1) as exporters write it, then a float op so the shape path feeds data.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    inits = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64),
             "minus_one": np.array([-1], np.int64)}
    return Spec(nodes, {"x": randn(rng, 3, 2, 4)}, inits)


# ---- Gather ----

def gather(data_shape, indices, axis=0, data_dtype=F32, indices_init=True):
    def make(rng):
        data = randn(rng, *data_shape) if data_dtype == F32 else rng.integers(-50, 50, data_shape).astype(data_dtype)
        attrs = {} if axis == 0 else {"axis": axis}
        if indices_init:
            return Spec(node("Gather", ["data", "indices"], **attrs), {"data": data}, {"indices": indices},
                        out_dtypes={"y": data_dtype})
        return Spec(node("Gather", ["data", "indices"], **attrs), {"data": data, "indices": indices},
                    out_dtypes={"y": data_dtype})

    return make


FIXTURES["op_gather_axis0_int64"] = gather((5, 4), np.array([3, 0, 3], np.int64))
FIXTURES["op_gather_axis1_int32"] = gather((3, 6, 2), np.array([[5, 1], [0, 2]], np.int32), axis=1)
FIXTURES["op_gather_negative_indices"] = gather((5, 4), np.array([-1, 0, -5], np.int64))
FIXTURES["op_gather_negative_axis"] = gather((2, 3, 4), np.array([1, -4], np.int64), axis=-1)
FIXTURES["op_gather_scalar_index"] = gather((4, 3), np.array(2, np.int64))
FIXTURES["op_gather_int64_data"] = gather((6,), np.array([5, -6, 2], np.int32), data_dtype=np.int64)
FIXTURES["op_gather_runtime_indices"] = gather((5, 3), np.array([[4, 0], [-2, 1]], np.int64),
                                               indices_init=False)


# ---- Unsqueeze / Squeeze: opset 11 takes `axes` as an attribute, opset 13 as an input ----

def unsqueeze_like(op, x_shape, axes, opset):
    def make(rng):
        x = randn(rng, *x_shape)
        if axes is None:
            return Spec(node(op, ["x"]), {"x": x}, opset=opset)
        if opset < 13:
            return Spec(node(op, ["x"], axes=axes), {"x": x}, opset=opset)
        return Spec(node(op, ["x", "axes"]), {"x": x}, {"axes": np.array(axes, np.int64)}, opset=opset)

    return make


FIXTURES["op_unsqueeze_opset11"] = unsqueeze_like("Unsqueeze", (3, 4), [0, 3], 11)
FIXTURES["op_unsqueeze_opset11_negative"] = unsqueeze_like("Unsqueeze", (3, 4), [-1], 11)
FIXTURES["op_unsqueeze_opset13"] = unsqueeze_like("Unsqueeze", (3, 4), [1], 13)
FIXTURES["op_unsqueeze_opset13_multi_negative"] = unsqueeze_like("Unsqueeze", (3, 4), [-1, 0], 13)
FIXTURES["op_squeeze_opset11"] = unsqueeze_like("Squeeze", (1, 3, 1, 4), [0, 2], 11)
FIXTURES["op_squeeze_opset11_all"] = unsqueeze_like("Squeeze", (1, 3, 1, 4, 1), None, 11)
FIXTURES["op_squeeze_opset13"] = unsqueeze_like("Squeeze", (3, 1, 4, 1), [-1, 1], 13)
FIXTURES["op_squeeze_opset13_all"] = unsqueeze_like("Squeeze", (1, 3, 1, 4), None, 13)


# ---- com.microsoft MatMulNBits: block-quantized weights (int4 LLMs) ----

def matmul_nbits(a_shape, n, bits, block, zero_points=None, bias=False, flat=False):
    """Random packed weights and per-block scales; zero_points None, "uint8" (packed like B)
    or "float"; `flat` gives scales and zero points as 1-D, as older exporters wrote them."""
    def make(rng):
        k = a_shape[-1]
        k_blocks = -(-k // block)
        b = rng.integers(0, 256, (n, k_blocks, block * bits // 8), dtype=np.uint8)
        scales = rng.uniform(0.01, 0.2, (n, k_blocks)).astype(F32)
        shape = (lambda cols: (n * cols,)) if flat else (lambda cols: (n, cols))
        inits = {"b": b, "scales": scales.reshape(shape(k_blocks))}
        inputs = ["a", "b", "scales"]
        if zero_points == "uint8":
            row = -(-k_blocks * bits // 8)
            inits["zero_points"] = rng.integers(0, 256, shape(row), dtype=np.uint8)
            inputs.append("zero_points")
        elif zero_points == "float":
            zp = rng.uniform(0, 2 ** bits - 1, (n, k_blocks)).astype(F32)
            inits["zero_points"] = zp.reshape(shape(k_blocks))
            inputs.append("zero_points")
        if bias:
            inputs += [""] * (5 - len(inputs)) + ["bias"]
            inits["bias"] = randn(rng, n)
        mm = helper.make_node("MatMulNBits", inputs, ["y"], name="matmulnbits_node",
                              domain="com.microsoft", K=k, N=n, bits=bits, block_size=block)
        return Spec(mm, {"a": randn(rng, *a_shape)}, inits)

    return make


FIXTURES["op_matmulnbits_4bit_decode"] = matmul_nbits((1, 1, 64), 24, 4, 32)
FIXTURES["op_matmulnbits_4bit_zero_points_bias"] = matmul_nbits((2, 3, 40), 10, 4, 16, "uint8",
                                                                bias=True)
FIXTURES["op_matmulnbits_4bit_float_zero_points"] = matmul_nbits((3, 48), 8, 4, 16, "float",
                                                                 flat=True)
FIXTURES["op_matmulnbits_4bit_prefill"] = matmul_nbits((2, 20, 36), 20, 4, 32, "uint8", bias=True)
FIXTURES["op_matmulnbits_8bit"] = matmul_nbits((2, 32), 6, 8, 16, "uint8")
FIXTURES["op_matmulnbits_2bit"] = matmul_nbits((1, 50), 5, 2, 16, "uint8", flat=True)


# ---- Cast ----

def cast(src, dst):
    def make(rng):
        if src == np.bool_:
            x = rng.random((3, 4)) < 0.5
        elif np.dtype(src).kind == "f":
            # Away from .0 and .5: no tie for truncation, and zero itself for the bool case.
            x = (rng.integers(-9, 10, (3, 4)) + rng.choice([-0.7, -0.3, 0.3, 0.7], (3, 4))).astype(src)
            x[0, 0] = 0.0
        else:
            x = rng.integers(-1000, 1000, (3, 4)).astype(src)
        to = NP_TO_ONNX[np.dtype(dst)]
        return Spec(node("Cast", ["x"], to=to), {"x": x}, out_dtypes={"y": dst})

    return make


for _src, _dst in ((F32, np.int64), (F32, np.int32), (np.int64, F32), (np.int32, F32),
                   (np.int64, np.int32), (np.int32, np.int64), (F32, np.bool_), (np.bool_, F32),
                   (F32, F32)):
    _names = {F32: "float", np.int64: "int64", np.int32: "int32", np.bool_: "bool"}
    FIXTURES[f"op_cast_{_names[_src]}_to_{_names[_dst]}"] = cast(_src, _dst)



# ---- attention (com.microsoft GroupQueryAttention and MultiHeadAttention) ----

def ms_node(op, inputs, outputs, **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"{op.lower()}_node",
                            domain=MS_DOMAIN, **attrs)


def rope_tables(rng, positions, half):
    angles = rng.uniform(0.0, 3.0, (positions, half))
    return np.cos(angles).astype(F32), np.sin(angles).astype(F32)


def gqa(b, s, hq, hkv, d, total, seqlens, past=None, packed=False, rotary=None, **attrs):
    """GroupQueryAttention: total_sequence_length a weight (exporters compute it from shapes,
    so it is known when planning), seqlens_k fed; rotary (interleaved) adds cos/sin tables."""
    def make(rng):
        feeds = {}
        if packed:
            feeds["query"] = randn(rng, b, s, (hq + 2 * hkv) * d)
        else:
            feeds["query"] = randn(rng, b, s, hq * d)
            feeds["key"] = randn(rng, b, s, hkv * d)
            feeds["value"] = randn(rng, b, s, hkv * d)
        if past is not None:
            feeds["past_key"] = randn(rng, b, hkv, past, d)
            feeds["past_value"] = randn(rng, b, hkv, past, d)
        feeds["seqlens_k"] = np.array(seqlens, np.int32)
        inits = {"total_sequence_length": np.array(total, np.int32)}
        names = ["query", "key", "value", "past_key", "past_value", "seqlens_k",
                 "total_sequence_length"]
        extra = {}
        if rotary is not None:
            cos, sin = rope_tables(rng, max(total, past or 0) + 2, d // 2)
            inits["cos_cache"], inits["sin_cache"] = cos, sin
            names += ["cos_cache", "sin_cache"]
            extra = {"do_rotary": 1, "rotary_interleaved": int(rotary)}
        ins = [n if n in feeds or n in inits else "" for n in names]
        outs = ("y", "present_key", "present_value")
        n = ms_node("GroupQueryAttention", ins, outs, num_heads=hq, kv_num_heads=hkv,
                    **extra, **attrs)
        return Spec(n, feeds, inits, outputs=outs, opset=21, check=False)

    return make


# A prompt, right-padded: entry 1 has 3 valid tokens of 5.
FIXTURES["op_gqa_prompt_padded"] = gqa(2, 5, 4, 2, 16, 5, [4, 2])
FIXTURES["op_gqa_prompt_packed_rotary"] = gqa(1, 6, 4, 2, 16, 6, [5], packed=True, rotary=False)
# Decoding over a separate past (present = past + 1): ragged lengths, interleaved rotary.
FIXTURES["op_gqa_decode_past_rotary"] = gqa(2, 1, 4, 2, 16, 7, [6, 3], past=6, rotary=True)
# Decoding with the buffer GenAI shares between past and present: past holds the maximum
# length (10); a local window and softcap on top.
FIXTURES["op_gqa_decode_shared_buffer"] = gqa(2, 1, 4, 1, 16, 8, [7, 4], past=10,
                                              local_window_size=4, softcap=2.0)


def mha(b, s, l, n, d, bias=False, mask=None, attn_bias=False, past=None, bnsh=False, **attrs):
    """MultiHeadAttention; `mask` is the key padding mask's form: "lens" [B], "2d" [B, T]."""
    def make(rng):
        t = (past or 0) + l
        feeds = {"query": randn(rng, b, s, n * d)}
        if bnsh:
            feeds["key"] = randn(rng, b, n, l, d)
            feeds["value"] = randn(rng, b, n, l, d)
        else:
            feeds["key"] = randn(rng, b, l, n * d)
            feeds["value"] = randn(rng, b, l, n * d)
        if bias:
            feeds["bias"] = randn(rng, 3 * n * d)
        if mask == "lens":
            feeds["key_padding_mask"] = np.array([t - 1 - i for i in range(b)], np.int32)
        elif mask == "2d":
            m = (rng.random((b, t)) < 0.75).astype(np.int32)
            m[:, 0] = 1
            feeds["key_padding_mask"] = m
        if attn_bias:
            feeds["attention_bias"] = randn(rng, 1, n, s, t)
        outs = ("y",)
        if past is not None:
            feeds["past_key"] = randn(rng, b, n, past, d)
            feeds["past_value"] = randn(rng, b, n, past, d)
            outs = ("y", "present_key", "present_value")
        names = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias",
                 "past_key", "past_value"]
        ins = [x if x in feeds else "" for x in names]
        while ins[-1] == "":
            ins.pop()
        node_ = ms_node("MultiHeadAttention", ins, outs, num_heads=n, **attrs)
        return Spec(node_, feeds, outputs=outs, opset=21, check=False)

    return make


FIXTURES["op_mha_bias_padding_mask"] = mha(2, 3, 5, 2, 8, bias=True, mask="2d")
FIXTURES["op_mha_past_unidirectional"] = mha(2, 2, 2, 2, 8, attn_bias=True, past=4,
                                             unidirectional=1)
FIXTURES["op_mha_cross_bnsh_lengths"] = mha(2, 3, 6, 2, 8, bias=True, mask="lens", bnsh=True,
                                            scale=0.25)

def gen_ops(root):
    names = sorted(FIXTURES)
    for name in names:
        spec = FIXTURES[name](rng_for(name))
        save_fixture(root, name, build(name, spec), [spec.feeds])
    return names
