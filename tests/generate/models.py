"""Whole-model fixtures: the MNIST-like CNN (static and dynamic batch), an MLP, add chains,
SqueezeNet 1.1 at a quarter width, awkward output names, external weights, and malformed files
for error tests."""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from common import init, make_model, rng_for, run_reference, save_fixture, value_info, write_tensor


def he(rng, shape, fan_in, gain=1.0):
    return (rng.standard_normal(shape) * gain * np.sqrt(2.0 / fan_in)).astype(np.float32)


def mnist_weights():
    rng = rng_for("mnist_cnn")
    return {
        "conv1.weight": he(rng, (8, 1, 5, 5), 25),
        "conv1.bias": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "conv2.weight": he(rng, (16, 8, 5, 5), 200),
        "conv2.bias": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "fc1.weight": he(rng, (64, 400), 400),
        "fc1.bias": (rng.standard_normal(64) * 0.1).astype(np.float32),
        # Small last layer: logits of a few units, so the softmax is far from one-hot.
        "fc2.weight": he(rng, (10, 64), 64, gain=2.5),
        "fc2.bias": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }


def mnist_images(rng, batch):
    """Digit-like inputs: a bright random stroke on a dim noisy background, in [0, 1]."""
    imgs = rng.random((batch, 1, 28, 28), dtype=np.float32) * 0.2
    for b in range(batch):
        r0, c0 = rng.integers(6, 12, size=2)
        r1, c1 = rng.integers(16, 22, size=2)
        for t in np.linspace(0.0, 1.0, 40):
            r, c = int(r0 + (r1 - r0) * t), int(c0 + (c1 - c0) * t)
            imgs[b, 0, r - 1 : r + 2, c - 1 : c + 2] = 1.0
    return imgs


def mnist_cnn(dynamic):
    w = mnist_weights()
    inits = [init(k, v) for k, v in w.items()]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["c1"], name="conv1",
                         kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2",
                         kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    if dynamic:
        # The exporter's shape arithmetic for x.view(x.size(0), -1).
        inits += [init("zero", np.array(0, np.int64)), init("axes0", np.array([0], np.int64)),
                  init("minus_one", np.array([-1], np.int64))]
        nodes += [
            helper.make_node("Shape", ["p2"], ["p2_shape"], name="shape"),
            helper.make_node("Gather", ["p2_shape", "zero"], ["batch"], name="gather_batch", axis=0),
            helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch_1d"], name="unsqueeze_batch"),
            helper.make_node("Concat", ["batch_1d", "minus_one"], ["flat_shape"], name="concat_shape",
                             axis=0),
        ]
        batch = "N"
    else:
        inits.append(init("flat_shape", np.array([1, 400], np.int64)))
        batch = 1
    nodes += [
        helper.make_node("Reshape", ["p2", "flat_shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["f1"], name="fc1", transB=1),
        helper.make_node("Relu", ["f1"], ["r3"], name="relu3"),
        helper.make_node("Gemm", ["r3", "fc2.weight", "fc2.bias"], ["logits"], name="fc2", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    name = "mnist_cnn_dynamic" if dynamic else "mnist_cnn"
    return make_model(name, nodes, [value_info("input", np.float32, [batch, 1, 28, 28])],
                      [value_info("probabilities", np.float32, [batch, 10])], inits)


def gen_mnist(root):
    rng = rng_for("mnist_cnn/inputs")
    # Four data sets for the static model: the concurrency test feeds different inputs per run.
    sets = [{"input": mnist_images(rng, 1)} for _ in range(4)]
    d = save_fixture(root, "mnist_cnn", mnist_cnn(False), sets)
    # The same input as .npy, for the CLI's `--input NAME=FILE.npy`.
    np.save(os.path.join(d, "input_0.npy"), sets[0]["input"])
    rng = rng_for("mnist_cnn_dynamic/inputs")
    save_fixture(root, "mnist_cnn_dynamic", mnist_cnn(True),
                 [{"input": mnist_images(rng, 3)}, {"input": mnist_images(rng, 5)}])


def squeezenet(width=4, classes=100, size=96):
    """SqueezeNet 1.1's graph (Iandola et al.; torchvision's squeezenet1_1) with every channel
    count divided by `width`: many small weights and activations larger than the weights, the
    shape of model that placement by summed activations could not split."""
    rng = rng_for("squeezenet_1_1/weights")
    inits, nodes = [], []

    def conv(name, x, cin, cout, k, stride=1, pad=0, relu=True):
        w = he(rng, (cout, cin, k, k), cin * k * k)
        b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
        inits.extend([init(f"{name}.weight", w), init(f"{name}.bias", b)])
        nodes.append(helper.make_node("Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}.c"],
                                      name=name, kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[pad] * 4))
        if not relu:
            return f"{name}.c"
        nodes.append(helper.make_node("Relu", [f"{name}.c"], [f"{name}.r"], name=f"{name}.relu"))
        return f"{name}.r"

    def pool(name, x):
        nodes.append(helper.make_node("MaxPool", [x], [name], name=name, kernel_shape=[3, 3],
                                      strides=[2, 2], ceil_mode=1))
        return name

    def fire(name, x, cin, squeeze, expand):
        s = conv(f"{name}.squeeze", x, cin, squeeze // width, 1)
        a = conv(f"{name}.expand1x1", s, squeeze // width, expand // width, 1)
        b = conv(f"{name}.expand3x3", s, squeeze // width, expand // width, 3, pad=1)
        nodes.append(helper.make_node("Concat", [a, b], [f"{name}.out"], name=f"{name}.concat",
                                      axis=1))
        return f"{name}.out", 2 * (expand // width)

    x = conv("conv1", "input", 3, 64 // width, 3, stride=2)
    x = pool("pool1", x)
    c = 64 // width
    for i, (sq, ex) in enumerate([(16, 64), (16, 64)]):
        x, c = fire(f"fire{i + 2}", x, c, sq, ex)
    x = pool("pool2", x)
    for i, (sq, ex) in enumerate([(32, 128), (32, 128)]):
        x, c = fire(f"fire{i + 4}", x, c, sq, ex)
    x = pool("pool3", x)
    for i, (sq, ex) in enumerate([(48, 192), (48, 192), (64, 256), (64, 256)]):
        x, c = fire(f"fire{i + 6}", x, c, sq, ex)
    x = conv("conv10", x, c, classes, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="avgpool"))
    inits.append(init("flat_shape", np.array([1, classes], np.int64)))
    nodes.append(helper.make_node("Reshape", ["pooled", "flat_shape"], ["logits"], name="flatten"))
    return make_model("squeezenet_1_1", nodes, [value_info("input", np.float32, [1, 3, size, size])],
                      [value_info("logits", np.float32, [1, classes])], inits)


def gen_squeezenet(root):
    rng = rng_for("squeezenet_1_1/inputs")
    image = rng.uniform(0.0, 1.0, (1, 3, 96, 96)).astype(np.float32)
    save_fixture(root, "squeezenet_1_1", squeezenet(), [{"input": image}])


def gen_mlp(root):
    rng = rng_for("mlp")
    w1 = he(rng, (64, 32), 64)
    b1 = (rng.standard_normal(32) * 0.1).astype(np.float32)
    w2 = he(rng, (32, 32), 32, gain=0.7)
    b2 = (rng.standard_normal(32) * 0.1).astype(np.float32)
    w3 = he(rng, (32, 10), 32)
    b3 = (rng.standard_normal(10) * 0.1).astype(np.float32)
    inits = [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2), init("w3", w3), init("b3", b3)]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="layer1"),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu"),
        helper.make_node("MatMul", ["a1", "w2"], ["m2"], name="layer2_matmul"),
        helper.make_node("Add", ["m2", "b2"], ["h2"], name="layer2_bias"),
        helper.make_node("Tanh", ["h2"], ["a2"], name="tanh"),
        helper.make_node("MatMul", ["a2", "w3"], ["m3"], name="layer3_matmul"),
        helper.make_node("Add", ["m3", "b3"], ["h3"], name="layer3_bias"),
        helper.make_node("Sigmoid", ["h3"], ["y"], name="sigmoid"),
    ]
    model = make_model("mlp", nodes, [value_info("x", np.float32, [4, 64])],
                       [value_info("y", np.float32, [4, 10])], inits)
    rng = rng_for("mlp/inputs")
    sets = [{"x": rng.standard_normal((4, 64)).astype(np.float32)} for _ in range(8)]
    save_fixture(root, "mlp", model, sets)


def add_chain(n, shape, name):
    """y = x + c1 + ... + cn: one Add node per constant, each feeding the next."""
    rng = rng_for(f"add_chain/{shape}")
    nodes, inits = [], []
    prev = "x"
    for i in range(n):
        c = f"c{i}"
        # Mostly positive constants: the sum grows away from zero, so relative checks bite.
        inits.append(init(c, rng.uniform(-0.01, 0.03, size=shape).astype(np.float32)))
        out = "y" if i == n - 1 else f"s{i}"
        nodes.append(helper.make_node("Add", [prev, c], [out], name=f"add{i}"))
        prev = out
    return make_model(name, nodes, [value_info("x", np.float32, shape)],
                      [value_info("y", np.float32, shape)], inits)


def gen_add_chain(root):
    rng = rng_for("add_chain_1000/inputs")
    save_fixture(root, "add_chain_1000", add_chain(1000, [1, 16], "add_chain_1000"),
                 [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(2)])


def elementwise_chain(shape, name, resident=False):
    """Sixteen elementwise ops, each feeding the next, on an [N, C, H, W] input: per-channel
    scales and shifts ([C, 1, 1]), scalars, the input itself as an operand, a constant minus
    the running value, and the unary ops the fusion pass covers. Unfused it is 16 dispatches;
    fused (graph/fuse.rs), two of eight steps.

    resident: the [N, C, H, W] tensor is made on the device, the input [N, C, 1, 1] plus a
    constant [1, 1, H, W], and a ReduceMean over everything makes the output a scalar, so
    a run moves a few bytes between host and device and its time is the chain's own."""
    rng = rng_for(f"elementwise_chain/{shape}" + ("/resident" if resident else ""))
    c = shape[1]
    per_channel = lambda lo, hi: rng.uniform(lo, hi, size=(c, 1, 1)).astype(np.float32)
    inits = [init("s1", per_channel(0.5, 1.5)), init("b1", per_channel(-0.5, 0.5)),
             init("s2", per_channel(0.5, 1.5)), init("b2", per_channel(0.5, 1.0)),
             init("half", np.array(0.5, np.float32)), init("two", np.array(2.0, np.float32)),
             init("one", np.array([1.0], np.float32))]
    steps = [("Mul", ["x", "s1"]), ("Add", [None, "b1"]), ("Sigmoid", [None]),
             ("Mul", ["x", None]), ("Add", [None, "half"]), ("Tanh", [None]),
             ("Mul", [None, "two"]), ("Abs", [None]), ("Add", [None, "one"]), ("Sqrt", [None]),
             ("Log", [None]), ("Neg", [None]), ("Exp", [None]), ("Mul", [None, "s2"]),
             ("Sub", ["b2", None]), ("Relu", [None])]
    nodes, prev = [], None
    x_shape, y_shape, last = shape, shape, "y"
    if resident:
        x_shape, y_shape, last = shape[:2] + [1, 1], [], "h_last"
        inits.append(init("base", rng.standard_normal([1, 1] + shape[2:]).astype(np.float32)))
        nodes.append(helper.make_node("Add", ["x_in", "base"], ["x"], name="spread"))
    for i, (op, ins) in enumerate(steps):
        out = last if i == len(steps) - 1 else f"h{i}"
        nodes.append(helper.make_node(op, [prev if v is None else v for v in ins], [out],
                                      name=f"{op.lower()}{i}"))
        prev = out
    if resident:
        nodes.append(helper.make_node("ReduceMean", [last], ["y"], name="mean", keepdims=0))
    x_name = "x_in" if resident else "x"
    return make_model(name, nodes, [value_info(x_name, np.float32, x_shape)],
                      [value_info("y", np.float32, y_shape)], inits)


def gen_elementwise_chain(root):
    rng = rng_for("elementwise_chain/inputs")
    shape = [2, 8, 5, 7]
    save_fixture(root, "elementwise_chain", elementwise_chain(shape, "elementwise_chain"),
                 [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(2)])


def gen_shape_input(root):
    """Reshape whose target shape is a graph input, then Relu: one session runs it at several
    target values (one plan per value), and the shape also passes through Add from the input."""
    nodes = [
        helper.make_node("Add", ["shape", "zero"], ["target"], name="shape_add"),
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    model = make_model("reshape_shape_input", nodes,
                       [value_info("x", np.float32, [2, 3, 4]), value_info("shape", np.int64, [2])],
                       [value_info("y", np.float32, ["rows", "cols"])],
                       [init("zero", np.zeros(2, np.int64))])
    rng = rng_for("reshape_shape_input")
    targets = [[4, 6], [3, -1], [24, 1], [4, 6]]
    sets = [{"x": rng.standard_normal((2, 3, 4)).astype(np.float32),
             "shape": np.array(t, np.int64)} for t in targets]
    save_fixture(root, "reshape_shape_input", model, sets)


def gen_bench_models(out_dir, sizes=(1, 10, 100, 1000, 10000)):
    """Add chains on float[1] for the dispatch-cost benchmarks, and the 16-op elementwise chain
    on [1, 64, 128, 128] (1M floats) for the fusion benchmark, with that tensor passed in and
    out, and made and reduced on the device (no reference outputs)."""
    os.makedirs(out_dir, exist_ok=True)
    for n in sizes:
        onnx.save_model(add_chain(n, [1], f"add_chain_{n}"), os.path.join(out_dir, f"add_chain_{n}.onnx"))
    onnx.save_model(elementwise_chain([1, 64, 128, 128], "elementwise_chain_16"),
                    os.path.join(out_dir, "elementwise_chain_16.onnx"))
    onnx.save_model(elementwise_chain([1, 64, 128, 128], "elementwise_chain_16_resident", True),
                    os.path.join(out_dir, "elementwise_chain_16_resident.onnx"))


def gen_output_names(root):
    """Value names with '/' and ':' as TF and PyTorch exporters write them, for the CLI's
    output-file naming."""
    nodes = [
        helper.make_node("Relu", ["input:0"], ["features/relu:0"], name="model/relu"),
        helper.make_node("Softmax", ["features/relu:0"], ["scores/softmax:0"], name="model/softmax",
                         axis=-1),
    ]
    model = make_model("output_names", nodes, [value_info("input:0", np.float32, [2, 5])],
                       [value_info("scores/softmax:0", np.float32, [2, 5]),
                        value_info("features/relu:0", np.float32, [2, 5])])
    rng = rng_for("output_names")
    save_fixture(root, "output_names", model, [{"input:0": rng.standard_normal((2, 5)).astype(np.float32)}])


def external_init(name, arr, location, offset):
    """A float initializer whose bytes are at `offset` of the file `location` (which the caller
    writes)."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(arr.shape))
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(arr.nbytes))):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    return t


def gen_external_data(root):
    """y = Relu((x @ W + b) * scale) with W and b in weights.bin at odd offsets (3 and
    3 + |W| + 6 = 201) and `scale` inline, so the loader must handle unaligned external tensors."""
    name = "external_data"
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    rng = rng_for(name)
    w = rng.standard_normal((8, 6)).astype(np.float32) * 0.5
    b = rng.standard_normal(6).astype(np.float32) * 0.1
    scale = np.array([2.0], np.float32)
    blob = bytearray(b"\x01\x02\x03")
    placed = []
    for tname, arr in (("W", w), ("b", b)):
        offset = len(blob)
        blob += arr.tobytes()
        placed.append((tname, arr, offset))
        blob += b"\xee" * 6
    with open(os.path.join(d, "weights.bin"), "wb") as f:
        f.write(bytes(blob))
    inits = [external_init(tname, arr, "weights.bin", offset) for tname, arr, offset in placed]
    inits.append(init("scale", scale))
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["xwb"], name="bias"),
        helper.make_node("Mul", ["xwb", "scale"], ["scaled"], name="scale"),
        helper.make_node("Relu", ["scaled"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, name, [value_info("x", np.float32, [3, 8])],
                              [value_info("y", np.float32, [3, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="vkml-fixtures", ir_version=8)
    path = os.path.join(d, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    onnx.checker.check_model(path, full_check=True)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    # onnxruntime reads the side file itself: the reference does not depend on our reading of it.
    outputs = run_reference(path, {"x": x})
    ref = np.maximum((x @ w + b) * scale, 0)
    assert np.allclose(outputs[0][1], ref, rtol=1e-5, atol=1e-6)
    from common import write_data_set
    write_data_set(d, 0, {"x": x}, outputs)


def gen_chain_external(root):
    """Six blocks y = Relu(x @ W_i + b_i), 64 wide, every weight external: blocks 0-2 in
    part-a.bin, blocks 3-5 in sub/part-b.bin (two side files, one in a subfolder), each tensor
    at a 64-byte aligned offset. Small enough to commit, large enough that three nodes capped
    at 45% of it must split it (the cluster tests of issue 19)."""
    name = "chain_external"
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "sub"), exist_ok=True)
    rng = rng_for(name)
    dim, blocks = 64, 6
    files = {"part-a.bin": bytearray(), "sub/part-b.bin": bytearray()}
    inits, nodes = [], []
    prev = "x"
    for i in range(blocks):
        w = (rng.standard_normal((dim, dim)) * np.sqrt(2.0 / dim)).astype(np.float32)
        b = (rng.standard_normal(dim) * 0.05).astype(np.float32)
        location = "part-a.bin" if i < 3 else "sub/part-b.bin"
        blob = files[location]
        for tname, arr in ((f"W{i}", w), (f"b{i}", b)):
            blob += b"\0" * (-len(blob) % 64)
            inits.append(external_init(tname, arr, location, len(blob)))
            blob += arr.tobytes()
        out = "y" if i == blocks - 1 else f"h{i}"
        nodes += [
            helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"], name=f"matmul{i}"),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"bias{i}"),
            helper.make_node("Relu", [f"a{i}"], [out], name=f"relu{i}"),
        ]
        prev = out
    for location, blob in files.items():
        with open(os.path.join(d, location), "wb") as f:
            f.write(bytes(blob))
    graph = helper.make_graph(nodes, name, [value_info("x", np.float32, [2, dim])],
                              [value_info("y", np.float32, [2, dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="vkml-fixtures", ir_version=8)
    path = os.path.join(d, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    onnx.checker.check_model(path, full_check=True)
    from common import write_data_set
    for k in range(2):
        x = rng.standard_normal((2, dim)).astype(np.float32)
        # onnxruntime reads the side files itself.
        write_data_set(d, k, {"x": x}, run_reference(path, {"x": x}))


def gen_malformed(root):
    d = os.path.join(root, "malformed")
    os.makedirs(d, exist_ok=True)
    # Cut inside the graph field: a length-delimited field that runs past the end of the file.
    full = open(os.path.join(root, "mnist_cnn", "model.onnx"), "rb").read()
    cut = full[: len(full) * 3 // 5]
    try:
        onnx.load_model_from_string(cut)
    except Exception:
        pass
    else:
        raise SystemExit("truncated model still parses; choose another cut")
    with open(os.path.join(d, "truncated.onnx"), "wb") as f:
        f.write(cut)
    # A well-formed model with a real ONNX op that vkml does not implement: MaxRoiPool (opset
    # 1, still in opset 20; no node test exercises it). It must stay an op vkml lacks, else
    # the error tests that load this model run it instead.
    nodes = [
        helper.make_node("Identity", ["x"], ["r"], name="identity"),
        helper.make_node("MaxRoiPool", ["r", "rois"], ["y"], name="roi_pool_node",
                         pooled_shape=[2, 2]),
    ]
    rois = init("rois", np.array([[0, 0, 0, 3, 3]], np.float32))
    model = make_model("unsupported_op", nodes, [value_info("x", np.float32, [1, 1, 4, 4])],
                       [value_info("y", np.float32, [1, 1, 2, 2])], [rois], opset=20)
    onnx.save_model(model, os.path.join(d, "unsupported_op.onnx"))
    # 'n' (0x6e) reads as protobuf field 13 with wire type 6, which does not exist; '\x93' is not
    # numpy's magic: no tensor reader can take this for a tensor.
    for fname in ("not_a_tensor.pb", "not_a_tensor.npy"):
        with open(os.path.join(d, fname), "wb") as f:
            f.write(b"not a tensor, just some text\n")
    # A tensor with the right name but the wrong shape and dtype for mnist_cnn's input.
    write_tensor(os.path.join(d, "wrong_shape_input.pb"), "input", np.zeros((1, 1, 27, 28), np.float32))
    write_tensor(os.path.join(d, "wrong_dtype_input.pb"), "input", np.zeros((1, 1, 28, 28), np.int32))
