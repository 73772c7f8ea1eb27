"""PyTorch versions of the benchmark models, built from the ONNX file's own weights (read with
onnx.numpy_helper), so both runners compute the same function.

Two shapes of model are understood, the ones the benchmarks use:
- add chains: every node is `Add(previous, constant)`: y = x + c1 + ... + cN;
- sequential CNNs/MLPs (the MNIST-like CNN): Conv, Relu, MaxPool, AveragePool, Flatten/Reshape
  (with or without the exporter's Shape/Gather/Unsqueeze/Concat arithmetic), Gemm, Softmax, one
  after another, as an nn.Sequential.
Anything else raises NotImplementedError, and the caller skips the torch runners.
"""

import numpy as np
import torch
from onnx import helper, numpy_helper
from torch import nn

# Ops that only compute a Reshape target; nn.Flatten replaces the whole chain.
SHAPE_ARITHMETIC = {"Shape", "Gather", "Unsqueeze", "Concat", "Constant"}


def attrs_of(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class AddChain(nn.Module):
    """y = x + c1 + ... + cN, one kernel launch per add in eager mode, as the ONNX graph has."""

    def __init__(self, constants):
        super().__init__()
        self.constants = [torch.from_numpy(c.copy()) for c in constants]

    def _apply(self, fn, *args, **kwargs):
        # Keep the plain tensor list on the same device as the module.
        self.constants = [fn(c) for c in self.constants]
        return super()._apply(fn, *args, **kwargs)

    def forward(self, x):
        for c in self.constants:
            x = x + c
        return x


def add_chain(model, weights):
    nodes = model.graph.node
    if not nodes or any(n.op_type != "Add" for n in nodes):
        return None
    prev = model.graph.input[0].name
    constants = []
    for n in nodes:
        a, b = n.input
        if a != prev or b not in weights:
            return None
        constants.append(weights[b])
        prev = n.output[0]
    return AddChain(constants)


def symmetric_pads(attrs, op):
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError(f"{op} with auto_pad")
    half = len(pads) // 2
    if pads[:half] != pads[half:]:
        raise NotImplementedError(f"{op} with asymmetric pads {pads}")
    return tuple(pads[:half])


def conv(node, weights):
    a = attrs_of(node)
    w = weights[node.input[1]]
    bias = weights[node.input[2]] if len(node.input) > 2 and node.input[2] else None
    group = a.get("group", 1)
    m = nn.Conv2d(w.shape[1] * group, w.shape[0], tuple(w.shape[2:]), stride=tuple(a.get("strides", [1, 1])),
                  padding=symmetric_pads(a, "Conv"), dilation=tuple(a.get("dilations", [1, 1])), groups=group,
                  bias=bias is not None)
    m.weight.data = torch.from_numpy(w.copy())
    if bias is not None:
        m.bias.data = torch.from_numpy(bias.copy())
    return m


def pool(node):
    a = attrs_of(node)
    kernel = tuple(a["kernel_shape"])
    stride = tuple(a.get("strides", [1] * len(kernel)))
    pads = symmetric_pads(a, node.op_type)
    ceil = bool(a.get("ceil_mode", 0))
    if node.op_type == "MaxPool":
        return nn.MaxPool2d(kernel, stride, pads, ceil_mode=ceil)
    return nn.AvgPool2d(kernel, stride, pads, ceil_mode=ceil, count_include_pad=bool(a.get("count_include_pad", 0)))


def gemm(node, weights):
    a = attrs_of(node)
    if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        raise NotImplementedError("Gemm other than x @ W (+ b)")
    w = weights[node.input[1]]
    if not a.get("transB", 0):
        w = w.T
    bias = weights.get(node.input[2]) if len(node.input) > 2 else None
    m = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None)
    m.weight.data = torch.from_numpy(np.array(w, dtype=np.float32, order="C"))
    if bias is not None:
        m.bias.data = torch.from_numpy(bias.copy())
    return m


def sequential(model, weights):
    layers = []
    for node in model.graph.node:
        op = node.op_type
        if op == "Conv":
            layers.append(conv(node, weights))
        elif op == "Relu":
            layers.append(nn.ReLU())
        elif op == "Sigmoid":
            layers.append(nn.Sigmoid())
        elif op == "Tanh":
            layers.append(nn.Tanh())
        elif op in ("MaxPool", "AveragePool"):
            layers.append(pool(node))
        elif op in ("Reshape", "Flatten"):
            layers.append(nn.Flatten())
        elif op == "Gemm":
            layers.append(gemm(node, weights))
        elif op == "Softmax":
            layers.append(nn.Softmax(dim=attrs_of(node).get("axis", -1)))
        elif op in SHAPE_ARITHMETIC:
            continue
        else:
            raise NotImplementedError(f"op {op} in a sequential model")
    return nn.Sequential(*layers)


def from_onnx(model):
    """The torch module computing `model`, on the CPU, in eval mode."""
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    module = add_chain(model, weights) or sequential(model, weights)
    return module.eval()
