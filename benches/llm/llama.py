#!/usr/bin/env python3
"""Llama-shaped models with random weights for the LLM benchmark (benches/llm/llm-gpu.sh), made
where they run (never committed), and PyTorch's figures on the same weights.

  llama.py make --shape 1b --dtype f16|int4 --out DIR
      Writes DIR/model.onnx (+ model.onnx.data) in the form ONNX Runtime GenAI's model builder
      emits: GroupQueryAttention with rotary and a cache that past and present share,
      SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization, MatMul (f16) or
      MatMulNBits (int4, block 32, f16 scales) for every projection; with genai_config.json
      and a word-level tokenizer.json, so that `vkml-node generate DIR` runs it.
  llama.py torch --shape 1b --prompt N --decode M [--check DIR]
      Prefill of N tokens and M greedy decode steps with transformers' LlamaForCausalLM on the
      same weights (f16, CUDA), a static cache and torch.compile's CUDA graphs: prints JSON.
      --check DIR also runs the tiny shape's greedy ids for comparison with vkml's.

Weights come from numpy's generator seeded by --seed, so `make` and `torch` agree without
sharing files. Shapes: 1b is Llama-3.2-1B's (hidden 2048, 16 layers, 32 query and 8 KV heads
of 64, MLP 8192, vocab 128256, untied head); 8b is Llama-3.1-8B's; tiny is for checking the
script on a CPU.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

SHAPES = {
    "tiny": dict(hidden=64, layers=2, heads=4, kv=2, mlp=128, vocab=256),
    "1b": dict(hidden=2048, layers=16, heads=32, kv=8, mlp=8192, vocab=128256),
    "8b": dict(hidden=4096, layers=32, heads=32, kv=8, mlp=14336, vocab=128256),
    # 8b's layers, four of them: made in a fraction of the time, for profiling a layer.
    "8b4": dict(hidden=4096, layers=4, heads=32, kv=8, mlp=14336, vocab=128256),
}
THETA = 500000.0
MAX_POS = 4096
EPS = 1e-5


def weights(shape, seed):
    """name -> f16 array in PyTorch's layout ([out, in] for projections)."""
    s = SHAPES[shape]
    h, d = s["hidden"], s["hidden"] // s["heads"]
    rng = np.random.default_rng(seed)

    def w(*dims):
        # Random signs and mantissas in one binade: magnitudes in [1/128, 1/64), a standard
        # deviation of about 0.012 (HF's init: 0.02), drawn as f16 bit patterns. Normal
        # samples cast to f16 took most of the 8B model's five minutes; this takes seconds,
        # and a decode's speed does not depend on the weights' values.
        n = int(np.prod(dims))
        bits = np.frombuffer(rng.bytes(2 * n), dtype=np.uint16) & 0x83FF | 0x2000
        return bits.astype(np.uint16).view(np.float16).reshape(dims)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(h, dtype=np.float32)).astype(np.float16)

    out = {"model.embed_tokens.weight": w(s["vocab"], h)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = norm()
        out[p + "self_attn.q_proj.weight"] = w(s["heads"] * d, h)
        out[p + "self_attn.k_proj.weight"] = w(s["kv"] * d, h)
        out[p + "self_attn.v_proj.weight"] = w(s["kv"] * d, h)
        out[p + "self_attn.o_proj.weight"] = w(h, s["heads"] * d)
        out[p + "post_attention_layernorm.weight"] = norm()
        out[p + "mlp.gate_proj.weight"] = w(s["mlp"], h)
        out[p + "mlp.up_proj.weight"] = w(s["mlp"], h)
        out[p + "mlp.down_proj.weight"] = w(h, s["mlp"])
    out["model.norm.weight"] = norm()
    out["lm_head.weight"] = w(s["vocab"], h)
    return out


def rotary_cache(d):
    inv = 1.0 / (THETA ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.outer(np.arange(MAX_POS, dtype=np.float64), inv)
    return np.cos(ang).astype(np.float16), np.sin(ang).astype(np.float16)


def quantize(w_out_in):
    """MatMulNBits' B [N, K/32, 16] (two 4-bit values a byte, low nibble first) and f16 scales
    [N * K/32], symmetric (zero point 8, the default when none is given)."""
    n, k = w_out_in.shape
    blocks = w_out_in.astype(np.float32).reshape(n, k // 32, 32)
    scale = np.abs(blocks).max(axis=2, keepdims=True) / 7.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(blocks / scale) + 8, 0, 15).astype(np.uint8)
    packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
    return packed, scale.reshape(-1).astype(np.float16)


def random_int4(rng, n, k):
    """quantize's outputs for random weights: uniform nibbles, and scales in [1/512, 1/256),
    about those of weights of quantize's magnitudes (the largest of 32 near 1/64, over 7)."""
    packed = np.frombuffer(rng.bytes(n * k // 2), dtype=np.uint8).reshape(n, k // 32, 16)
    bits = np.frombuffer(rng.bytes(2 * n * (k // 32)), dtype=np.uint16) & 0x03FF | 0x1800
    return packed, bits.astype(np.uint16).view(np.float16)


def make(args):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    s = SHAPES[args.shape]
    h, layers, heads, kv, vocab = s["hidden"], s["layers"], s["heads"], s["kv"], s["vocab"]
    d = h // heads
    ws = weights(args.shape, args.seed)
    os.makedirs(args.out, exist_ok=True)
    inits, nodes = [], []
    data = open(os.path.join(args.out, "model.onnx.data"), "wb")

    def init(name, array):
        """An initializer; from 1 KiB up its bytes go straight to model.onnx.data (page
        aligned), rather than through protobuf copies of the whole model, which took most of
        an 8B model's making."""
        if array.nbytes < 1024:
            inits.append(numpy_helper.from_array(array, name))
            return name
        at = -data.tell() % 4096
        data.write(b"\0" * at)
        offset = data.tell()
        np.ascontiguousarray(array).tofile(data)
        t = TensorProto(name=name, dims=array.shape,
                        data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                        data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "model.onnx.data"), ("offset", str(offset)),
                           ("length", str(array.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        inits.append(t)
        return name

    def node(op, ins, outs, domain="", **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=outs[0] + "/node", domain=domain, **attrs))
        return outs

    qrng = np.random.default_rng(args.seed + 1)

    def linear(x, key, out):
        w = ws[key]
        if args.dtype == "int4":
            n, k = w.shape
            # The tiny shape's weights are quantized, so that its tokens can be compared with
            # the f16 model's; the benchmark shapes' are drawn as packed nibbles and scales
            # directly (quantizing the 8B model took six minutes of the GPU machine's time,
            # and a decode's speed does not depend on the values).
            b, sc = quantize(w) if args.shape == "tiny" else random_int4(qrng, n, k)
            return node("MatMulNBits", [x, init(key + ".q", b), init(key + ".s", sc)], [out],
                        domain="com.microsoft", K=k, N=n, bits=4, block_size=32,
                        accuracy_level=4)[0]
        return node("MatMul", [x, init(key + ".t", np.ascontiguousarray(w.T))], [out])[0]

    init("one", np.array([1], dtype=np.int64))
    init("axis1", np.array([1], dtype=np.int64))
    cos, sin = rotary_cache(d)
    init("cos_cache", cos)
    init("sin_cache", sin)
    node("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], keepdims=0)
    node("Sub", ["mask_sum", "one"], ["seqlens64"])
    node("Cast", ["seqlens64"], ["seqlens_k"], to=TensorProto.INT32)
    node("Shape", ["attention_mask"], ["mask_shape"])
    node("Gather", ["mask_shape", "one"], ["total64"], axis=0)
    node("Cast", ["total64"], ["total1"], to=TensorProto.INT32)
    node("Squeeze", ["total1"], ["total_len"])
    x = node("Gather", [init("embed", ws["model.embed_tokens.weight"]), "input_ids"], ["x0"])[0]
    residual = None
    outputs = []
    for i in range(layers):
        p = f"model.layers.{i}."
        ln1 = init(p + "ln1", ws[p + "input_layernorm.weight"])
        if residual is None:
            normed = node("SimplifiedLayerNormalization", [x, ln1], [f"l{i}.n1"], axis=-1,
                          epsilon=EPS)[0]
            residual = x
        else:
            normed, _, _, residual = node("SkipSimplifiedLayerNormalization", [x, residual, ln1],
                                          [f"l{i}.n1", "", "", f"l{i}.r1"],
                                          domain="com.microsoft", epsilon=EPS)
        q = linear(normed, p + "self_attn.q_proj.weight", f"l{i}.q")
        k = linear(normed, p + "self_attn.k_proj.weight", f"l{i}.k")
        v = linear(normed, p + "self_attn.v_proj.weight", f"l{i}.v")
        attn, _, _ = node("GroupQueryAttention",
                          [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                           "seqlens_k", "total_len", "cos_cache", "sin_cache"],
                          [f"l{i}.attn", f"present.{i}.key", f"present.{i}.value"],
                          domain="com.microsoft", num_heads=heads, kv_num_heads=kv,
                          do_rotary=1, rotary_interleaved=0, scale=float(d) ** -0.5)
        o = linear(attn, p + "self_attn.o_proj.weight", f"l{i}.o")
        ln2 = init(p + "ln2", ws[p + "post_attention_layernorm.weight"])
        normed, _, _, residual = node("SkipSimplifiedLayerNormalization", [o, residual, ln2],
                                      [f"l{i}.n2", "", "", f"l{i}.r2"], domain="com.microsoft",
                                      epsilon=EPS)
        gate = linear(normed, p + "mlp.gate_proj.weight", f"l{i}.gate")
        up = linear(normed, p + "mlp.up_proj.weight", f"l{i}.up")
        sig = node("Sigmoid", [gate], [f"l{i}.sig"])[0]
        act = node("Mul", [gate, sig], [f"l{i}.silu"])[0]
        prod = node("Mul", [act, up], [f"l{i}.prod"])[0]
        x = linear(prod, p + "mlp.down_proj.weight", f"l{i}.down")
        outputs += [f"present.{i}.key", f"present.{i}.value"]
    final, _, _, _ = node("SkipSimplifiedLayerNormalization",
                          [x, residual, init("final_norm", ws["model.norm.weight"])],
                          ["final", "", "", "final_sum"], domain="com.microsoft", epsilon=EPS)
    linear(final, "lm_head.weight", "logits")

    f16, i64 = TensorProto.FLOAT16, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", i64,
                                            ["batch_size", "total_sequence_length"])]
    outs = [helper.make_tensor_value_info("logits", f16, ["batch_size", "sequence_length", vocab])]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kind}", f16,
                ["batch_size", kv, "past_sequence_length", d]))
            outs.append(helper.make_tensor_value_info(
                f"present.{i}.{kind}", f16, ["batch_size", kv, "total_sequence_length", d]))
    graph = helper.make_graph(nodes, f"llama_{args.shape}_{args.dtype}", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    path = os.path.join(args.out, "model.onnx")
    data.close()
    onnx.save_model(model, path)
    json.dump({"model": {"bos_token_id": 1, "eos_token_id": 2, "context_length": MAX_POS,
                         "decoder": {"head_size": d, "hidden_size": h, "num_attention_heads": heads,
                                     "num_hidden_layers": layers, "num_key_value_heads": kv},
                         "vocab_size": vocab, "type": "llama"},
               "search": {"past_present_share_buffer": True, "max_length": MAX_POS}},
              open(os.path.join(args.out, "genai_config.json"), "w"), indent=1)
    write_tokenizer(args.out, vocab)
    print(f"wrote {path} ({args.shape}, {args.dtype})")


def write_tokenizer(out, vocab):
    """A word-level tokenizer over the ids: the benchmark feeds ids, this only lets the folder
    open."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(out, "tokenizer.json"))


def torch_model(shape, seed, device, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    s = SHAPES[shape]
    config = LlamaConfig(vocab_size=s["vocab"], hidden_size=s["hidden"],
                         intermediate_size=s["mlp"], num_hidden_layers=s["layers"],
                         num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
                         max_position_embeddings=MAX_POS, rms_norm_eps=EPS, rope_theta=THETA,
                         tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    state = {k: torch.from_numpy(v) for k, v in weights(shape, seed).items()}
    model.load_state_dict(state, assign=True, strict=True)
    # Buffers the meta device left empty (the rotary frequencies) are rebuilt on the device.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)
    return model.to(device=device, dtype=dtype).eval()


def bench_torch(args):
    import torch

    model = torch_model(args.shape, args.seed, args.device, torch.float16)
    vocab = SHAPES[args.shape]["vocab"]
    rng = np.random.default_rng(1)
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu"}
    for prompt in args.prompt:
        ids = torch.tensor(rng.integers(3, vocab, size=(1, prompt)), device=args.device)
        kw = dict(do_sample=False, cache_implementation="static", pad_token_id=0,
                  eos_token_id=None, min_new_tokens=args.decode, max_new_tokens=args.decode)
        # Warm-ups compile the CUDA graphs (static cache: transformers compiles the decode
        # step with mode="reduce-overhead" by itself).
        for _ in range(2):
            model.generate(ids, **kw)
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            model(ids)
        sync()
        prefill = time.perf_counter() - t
        times = []
        for _ in range(3):
            sync()
            t = time.perf_counter()
            model.generate(ids, **kw)
            sync()
            times.append(time.perf_counter() - t)
        total = sorted(times)[1]
        decode_s = max(total - prefill, 1e-9)
        result[f"prompt_{prompt}"] = {
            "prefill_tokens_per_s": prompt / prefill,
            "decode_tokens_per_s": (args.decode - 1) / decode_s,
        }
    # transformers compiles the decode step itself (mode "reduce-overhead": CUDA graphs) when
    # the cache is static and the device is CUDA; this says whether it did.
    result["compiled"] = getattr(model, "_compiled_call", None) is not None
    print(json.dumps(result))
    if args.profile and cuda:
        profile_torch(model, ids, kw, args)


def profile_torch(model, ids, kw, args):
    """The GPU kernels of a generate call of the last prompt, by total time (CUPTI sees the
    kernels inside CUDA graphs), into args.profile: where PyTorch's decode step goes, beside
    vkml's `--profile`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model.generate(ids, **kw)
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name, [0, 0.0])
            r[0] += 1
            r[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    total = sum(t for _, t in rows.values())
    with open(args.profile, "w") as f:
        f.write(f"generate of {ids.shape[1]} + {args.decode} tokens: GPU kernels {total:.0f} us "
                f"({total / max(args.decode, 1):.0f} us a token, prefill included)\n")
        f.write(f"{'us':>10} {'calls':>7} {'us/call':>8}  kernel\n")
        for name, (n, t) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:40]:
            f.write(f"{t:>10.0f} {n:>7} {t / n:>8.2f}  {name[:150]}\n")


def greedy_ids(args):
    """The tiny shape's greedy ids on the CPU in f32, for checking a vkml run of `make`'s
    model."""
    import torch

    model = torch_model(args.shape, args.seed, "cpu", torch.float32)
    ids = torch.tensor([args.ids])
    out = model.generate(ids, do_sample=False, max_new_tokens=args.decode, min_new_tokens=args.decode,
                         pad_token_id=0, eos_token_id=None)
    print(json.dumps(out[0, len(args.ids):].tolist()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--shape", choices=SHAPES, default="1b")
    m.add_argument("--dtype", choices=["f16", "int4"], default="f16")
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("torch")
    t.add_argument("--shape", choices=SHAPES, default="1b")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--prompt", type=int, nargs="+", default=[128])
    t.add_argument("--decode", type=int, default=64)
    t.add_argument("--device", default="cuda")
    t.add_argument("--profile", help="also write a generate call's CUDA kernels by time to "
                   "this file (the last prompt)")
    g = sub.add_parser("greedy")
    g.add_argument("--shape", choices=SHAPES, default="tiny")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--ids", type=int, nargs="+", required=True)
    g.add_argument("--decode", type=int, default=16)
    args = ap.parse_args()
    {"make": make, "torch": bench_torch, "greedy": greedy_ids}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
