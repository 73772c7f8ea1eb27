"""Fixtures of the LLM building blocks onnxruntime's exporters and model builder emit: its
com.microsoft norms, GELUs and RotaryEmbedding, and SimplifiedLayerNormalization (which it keeps
in the default domain). onnx's checker does not know these ops, so the models skip it.
Registered into op_models.FIXTURES on import (generate_fixtures.py imports this module)."""

import numpy as np
from onnx import helper

from common import MS_DOMAIN
from op_models import F32, Spec, fixture, randn

F16 = np.float16


def ms_node(op, inputs, outputs=("y",), domain=MS_DOMAIN, **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"{op.lower()}_node", domain=domain, **attrs)


# ---- SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization ----

def skip_norm(op, x_shape, skip_shape, beta=False, bias=False, outputs=("y",), dtype=F32, epsilon=None):
    """`outputs` are the node's, "" for one not wanted, "-" for one computed but read by nothing;
    the others become graph outputs. ("-" stands in for a second "": exporters write
    ("y", "", "", "sum"), which vkml's graph layer refuses for now, taking both "" for one value.)"""

    def make(rng):
        hidden = x_shape[-1]
        feeds = {"x": randn(rng, *x_shape).astype(dtype), "skip": randn(rng, *skip_shape).astype(dtype)}
        inits = {"gamma": (1.0 + randn(rng, hidden, scale=0.2)).astype(dtype)}
        ins = ["x", "skip", "gamma"]
        if op == "SkipLayerNormalization":
            ins.append("beta" if beta else "")
            if beta:
                inits["beta"] = randn(rng, hidden, scale=0.5).astype(dtype)
        if bias:
            ins.append("bias")
            inits["bias"] = randn(rng, hidden, scale=0.5).astype(dtype)
        while ins[-1] == "":
            ins.pop()
        attrs = {} if epsilon is None else {"epsilon": epsilon}
        node_outs = [f"unused_{i}" if o == "-" else o for i, o in enumerate(outputs)]
        wanted = [o for o in outputs if o not in ("", "-")]
        # y and the sum have the input's type; mean and inv_std_var are float.
        out_dtypes = {o: (dtype if o in ("y", "sum") else F32) for o in wanted}
        return Spec(ms_node(op, ins, node_outs, **attrs), feeds, inits, outputs=wanted,
                    out_dtypes=out_dtypes, check=False)

    return make


SKIP = "SkipLayerNormalization"
SKIP_RMS = "SkipSimplifiedLayerNormalization"
FIXTURES_NORM = {
    "op_skip_layernorm": skip_norm(SKIP, (2, 3, 16), (2, 3, 16), beta=True, bias=True,
                                   outputs=("y", "mean", "inv", "sum")),
    "op_skip_layernorm_skip_2d_no_beta": skip_norm(SKIP, (2, 3, 16), (3, 16), epsilon=1e-5),
    "op_skip_layernorm_skip_batch1_sum": skip_norm(SKIP, (2, 3, 16), (1, 3, 16), bias=True,
                                                   outputs=("y", "-", "", "sum")),
    "op_skip_layernorm_f16": skip_norm(SKIP, (2, 3, 16), (2, 3, 16), beta=True, bias=True,
                                       outputs=("y", "", "-", "sum"), dtype=F16),
    "op_skip_simplified_layernorm": skip_norm(SKIP_RMS, (2, 3, 16), (2, 3, 16)),
    "op_skip_simplified_layernorm_bias_sum": skip_norm(SKIP_RMS, (2, 3, 16), (2, 3, 16), bias=True,
                                                       outputs=("y", "", "inv", "sum"), epsilon=1e-6),
    "op_skip_simplified_layernorm_2d": skip_norm(SKIP_RMS, (5, 24), (5, 24), bias=True),
    "op_skip_simplified_layernorm_f16": skip_norm(SKIP_RMS, (2, 3, 16), (3, 16), bias=True,
                                                  outputs=("y", "-", "", "sum"), dtype=F16),
}


def simplified_norm(x_shape, axis, scale_shape, inv=True, dtype=F32):
    def make(rng):
        outputs = ["y", "inv"] if inv else ["y"]
        n = ms_node("SimplifiedLayerNormalization", ["x", "scale"], outputs, domain="", axis=axis, epsilon=1e-5)
        return Spec(n, {"x": randn(rng, *x_shape).astype(dtype)},
                    {"scale": (1.0 + randn(rng, *scale_shape, scale=0.2)).astype(dtype)},
                    outputs=outputs, out_dtypes={"y": dtype, "inv": F32}, check=False)

    return make


FIXTURES_NORM["op_simplified_layernorm"] = simplified_norm((2, 3, 16), -1, (16,))
FIXTURES_NORM["op_simplified_layernorm_axis1"] = simplified_norm((2, 3, 8), 1, (3, 8), inv=False)
FIXTURES_NORM["op_simplified_layernorm_f16"] = simplified_norm((2, 3, 16), -1, (16,), dtype=F16)


# ---- FastGelu, BiasGelu, QuickGelu ----
# In f16 onnxruntime's CPU FastGelu and QuickGelu work in half precision (1-2 ulps from the
# exact value, which vkml rounds once from float): only BiasGelu's f16 is a fair reference.

def gelu(op, bias, dtype=F32, **attrs):
    def make(rng):
        feeds = {"x": randn(rng, 2, 3, 8, scale=2.0).astype(dtype)}
        ins = ["x"]
        if bias:
            ins.append("b")
            feeds["b"] = randn(rng, 8).astype(dtype)
        return Spec(ms_node(op, ins, **attrs), feeds, out_dtypes={"y": dtype}, check=False)

    return make


FIXTURES_GELU = {
    "op_fastgelu": gelu("FastGelu", False),
    "op_fastgelu_bias": gelu("FastGelu", True),
    "op_biasgelu": gelu("BiasGelu", True),
    "op_biasgelu_f16": gelu("BiasGelu", True, dtype=F16),
    "op_quickgelu": gelu("QuickGelu", False),
    "op_quickgelu_alpha": gelu("QuickGelu", False, alpha=1.0),
}


# ---- com.microsoft RotaryEmbedding ----

def caches(max_pos, half, dtype):
    """cos and sin of position * theta^(-2i / rot), as a model builder computes them."""
    inv_freq = 10000.0 ** (-np.arange(half) / half)
    angles = np.arange(max_pos)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def rotary(x_shape, num_heads=None, rot_dim=None, interleaved=0, offset=None, dtype=F32):
    """x [B, S, H * D] or [B, H, S, D]; positions per token (random), or `offset` + s."""

    def make(rng):
        batch, seq = x_shape[0], x_shape[-2 if len(x_shape) == 4 else 1]
        head = x_shape[-1] if len(x_shape) == 4 else x_shape[-1] // num_heads
        half = (rot_dim or head) // 2
        cos, sin = caches(16, half, dtype)
        if offset is None:
            pos = rng.integers(0, 16, (batch, seq)).astype(np.int64)
        else:
            pos = np.array([offset], np.int64)
        attrs = {"interleaved": interleaved}
        if num_heads:
            attrs["num_heads"] = num_heads
        if rot_dim:
            attrs["rotary_embedding_dim"] = rot_dim
        n = ms_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], **attrs)
        feeds = {"x": randn(rng, *x_shape).astype(dtype), "pos": pos}
        return Spec(n, feeds, {"cos": cos, "sin": sin}, out_dtypes={"y": dtype}, check=False)

    return make


FIXTURES_ROTARY = {
    "op_rotary_ms": rotary((2, 3, 32), num_heads=4),
    "op_rotary_ms_interleaved_4d": rotary((2, 2, 3, 8), interleaved=1),
    "op_rotary_ms_partial": rotary((2, 3, 32), num_heads=2, rot_dim=8),
    "op_rotary_ms_partial_interleaved": rotary((1, 4, 24), num_heads=2, rot_dim=4, interleaved=1),
    "op_rotary_ms_offset": rotary((1, 5, 16), num_heads=2, offset=7),
    "op_rotary_ms_f16": rotary((2, 3, 32), num_heads=4, dtype=F16),
}

for _name, _make in {**FIXTURES_NORM, **FIXTURES_GELU, **FIXTURES_ROTARY}.items():
    fixture(_name)(_make)

