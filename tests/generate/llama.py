#!/usr/bin/env python3
"""Writes tests/models/llama_optimum/ and tests/models/llama_genai/: one tiny Llama-architecture
model (random weights, seeded) exported the two ways people get LLMs as ONNX, each with a byte-level
BPE tokenizer.json and onnxruntime's references.

- `llama_optimum/`: Optimum's `text-generation-with-past` export, fp32, standard ops only. Inputs
  `input_ids`, `attention_mask`, `position_ids`, `past_key_values.{i}.key/value`; outputs `logits`,
  `present.{i}.key/value`.
- `llama_genai/`: onnxruntime-genai's model builder at int4 for the CPU (GroupQueryAttention with
  rotary embedding inside, SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization,
  MatMulNBits), with its model.onnx.data and genai_config.json as a user's folder has them.
  MatMulNBits is built with accuracy_level=1 (fp32 activations) rather than the CPU default 4
  (activations quantized to int8 at run time), so the reference is the plain
  dequantize-then-multiply semantics that any runtime computing in fp32 must reproduce.

Each folder holds:
- `test_data_set_0`: the prefill of the prompt (past of length 0); `test_data_set_1..3`: three
  greedy decode steps, each fed the previous step's present as its past (past and present are
  separate tensors, the past growing by one each step), with onnxruntime's outputs (CPU, graph
  optimisations off, one thread), in ONNX's test layout.
- `reference.json`: the prompt, its token ids, and the 32 token ids that greedy generation by
  onnxruntime's own loop produces (Optimum form: a plain onnxruntime loop feeding present to
  past; GenAI form: onnxruntime-genai's Generator with do_sample false, checked against the same
  plain loop), with the model's input and output names.

The script checks that the greedy tokens are not degenerate (at least 8 distinct ids, no
end-of-sequence token), that every greedy step wins by a clear margin (so a correct runtime's
rounding cannot flip a token), that onnxruntime agrees with PyTorch on the fp32 form, and that
each folder stays under 2 MB. It prints each graph's op types by domain (the contrib ops are the
com.microsoft ones, plus SimplifiedLayerNormalization, which onnxruntime registers in the default
domain).

Needs: torch (CPU build is enough), transformers 5.x, tokenizers, onnx==1.22.0, onnxruntime,
onnxruntime-genai (with onnx_ir and onnxscript for its builder), numpy; and Optimum
(`pip install "optimum[onnx]"`), which pins transformers below 4.58 while onnxruntime-genai's
builder needs 5.x, so Optimum usually lives in a second virtual environment whose Python is
passed as --optimum-python (the export runs there as a subprocess):

    python3 -m venv /tmp/venv-llm && /tmp/venv-llm/bin/pip install torch transformers tokenizers \\
        onnx==1.22.0 onnxruntime onnxruntime-genai onnx_ir onnxscript numpy
    python3 -m venv /tmp/venv-optimum && /tmp/venv-optimum/bin/pip install torch "optimum[onnx]"
    /tmp/venv-llm/bin/python tests/generate/llama.py --optimum-python /tmp/venv-optimum/bin/python

It rewrites both folders from scratch. Seeds are fixed and onnxruntime runs on one thread, so a
rerun with the same package versions writes the same references.
"""

import argparse
import collections
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
MAX_FOLDER_BYTES = 2 * 1024 * 1024
NEW_TOKENS = 32
DECODE_STEPS = 3
MIN_DISTINCT = 8
# Smallest gap between the best and second-best logit at any greedy step. fp32 rounding moves
# these logits by ~1e-5; a gap this wide means a token can only flip through a real bug.
MIN_MARGIN = 0.05

VOCAB = 512
CONFIG = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
    tie_word_embeddings=False,
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
PROMPT = "The lighthouse keeper wrote in his log"

# The tokenizer's training text: the vocabulary is byte-level BPE learned on this.
CORPUS = """\
The lighthouse keeper wrote in his log every evening. The wind came from the west, the sea was
grey, and a small boat passed the rocks at noon. He counted the gulls on the rail and wrote the
number down: seven, then nine, then twelve. In winter the lamp burned for sixteen hours a day,
and the keeper climbed the stairs four times between dusk and dawn to wind the clockwork that
turned the lens. His daughter sent letters from the city. She wrote about trains, markets,
libraries and the noise of the streets at night; he answered with the tides, the colour of the
water and the names of the ships that went by. One spring a storm broke three windows and
flooded the store room. The keeper dried the charts on a line above the stove, mended the
frames with wood from a wrecked crate, and painted the door blue because blue was the only
paint left. When the inspector came in May he found the lamp clean, the log complete, and a
blue door that nobody had asked for. He wrote in his report that the station was in good
order. Years later the light was automated, the keeper moved to a house in the village, and
the log books went to the museum, where visitors read about the gulls, the boats, the letters
and the storm, and wondered what the sea looked like on the days he wrote nothing at all.
Numbers in the log: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 24, 32, 64, 128, 256, 512.
Questions he asked himself: Why does the fog come at dawn? How far can a light be seen? Who
will keep the lamp when I am gone? What is the sound of a ship that does not stop?
"""


# ---------------------------------------------------------------------------------------------
# Tokenizer and model


def make_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"tokenizer: {tok.get_vocab_size()} tokens, wanted {VOCAB}: lengthen CORPUS")
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            raise SystemExit(f"tokenizer: {t} is id {tok.token_to_id(t)}, wanted {i}")
    return tok


def seed(name):
    torch.manual_seed(zlib.crc32(name.encode()))


def reinit(model, lm_head_gain):
    """Weights with O(1) activations and peaked logits. Llama's own init (normal, std 0.02)
    leaves every logit near 0, so greedy decoding would ride on rounding noise."""
    seed("llama/weights")
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            gain = lm_head_gain if name == "lm_head" else 1.0
            nn.init.normal_(m.weight, 0.0, gain / math.sqrt(m.in_features))
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 1.0)
        elif type(m).__name__ == "LlamaRMSNorm":
            nn.init.normal_(m.weight, 1.0, 0.2)
    model.eval()
    return model


def make_hf_model(hf_dir, tokenizer, lm_head_gain):
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    model = reinit(LlamaForCausalLM(LlamaConfig(**CONFIG)), lm_head_gain)
    model.save_pretrained(hf_dir)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(hf_dir)
    return model


def torch_greedy(model, prompt_ids):
    """PyTorch's own cached greedy loop, for cross-checking the fp32 export."""
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=2)
    return out[0, len(prompt_ids):].tolist()


# ---------------------------------------------------------------------------------------------
# Exports


def run_checked(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}")
    return proc


def export_optimum(hf_dir, out_dir, optimum_python):
    run_checked([optimum_python, "-m", "optimum.commands.optimum_cli", "export", "onnx",
                 "--model", hf_dir, "--task", "text-generation-with-past", "--device", "cpu",
                 "--dtype", "fp32", out_dir], "optimum export")
    return out_dir


def export_genai(hf_dir, out_dir, cache_dir):
    run_checked([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf_dir,
                 "-o", out_dir, "-p", "int4", "-e", "cpu", "-c", cache_dir,
                 "--extra_options", "accuracy_level=1"], "onnxruntime-genai builder")
    return out_dir


def copy_files(src, dst, names):
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    os.makedirs(dst)
    for n in names:
        if not os.path.exists(os.path.join(src, n)):
            raise SystemExit(f"{src}: the exporter wrote no {n} (it wrote {sorted(os.listdir(src))})")
        shutil.copy(os.path.join(src, n), os.path.join(dst, n))


# ---------------------------------------------------------------------------------------------
# onnxruntime references


class Decoder:
    """One model.onnx run step by step by plain onnxruntime: the prompt, then one token at a
    time, each step's present fed back as the next step's past."""

    def __init__(self, path):
        self.sess = common.session_for(path)
        self.inputs = [i.name for i in self.sess.get_inputs()]
        self.outputs = [o.name for o in self.sess.get_outputs()]
        self.past_names = [n for n in self.inputs if n.startswith("past_key_values.")]
        shape = self.sess.get_inputs()[self.inputs.index(self.past_names[0])].shape
        self.kv_heads = CONFIG["num_key_value_heads"]
        self.head_dim = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
        if shape[1] != self.kv_heads:
            raise SystemExit(f"{path}: past has {shape[1]} heads, wanted {self.kv_heads}")

    def feeds(self, new_ids, past):
        """Inputs for `new_ids` after `past` (None: nothing yet), in the graph's input order."""
        past_len = 0 if past is None else past[self.past_names[0]].shape[2]
        total = past_len + len(new_ids)
        values = {
            "input_ids": np.array([new_ids], dtype=np.int64),
            "attention_mask": np.ones((1, total), dtype=np.int64),
            "position_ids": np.arange(past_len, total, dtype=np.int64)[None, :],
        }
        for n in self.past_names:
            empty = np.zeros((1, self.kv_heads, 0, self.head_dim), dtype=np.float32)
            values[n] = empty if past is None else past[n]
        unknown = [n for n in self.inputs if n not in values]
        if unknown:
            raise SystemExit(f"model input(s) {unknown} are not fed by this generator")
        return {n: values[n] for n in self.inputs}

    def step(self, new_ids, past):
        feeds = self.feeds(new_ids, past)
        outs = list(zip(self.outputs, self.sess.run(self.outputs, feeds)))
        named = dict(outs)
        present = {p: named[p.replace("past_key_values.", "present.")] for p in self.past_names}
        return feeds, outs, named["logits"][0, -1], present

    def greedy(self, prompt_ids, new_tokens):
        """Greedy ids, each step's (feeds, outputs), and the smallest top-1/top-2 logit gap."""
        ids, steps, margin = [], [], math.inf
        new, past = list(prompt_ids), None
        for _ in range(new_tokens):
            feeds, outs, last, past = self.step(new, past)
            steps.append((feeds, outs))
            top2 = np.sort(last)[-2:]
            margin = min(margin, float(top2[1] - top2[0]))
            ids.append(int(np.argmax(last)))
            new = [ids[-1]]
        return ids, steps, margin


def genai_greedy(folder, prompt, prompt_ids):
    import onnxruntime_genai as og

    model = og.Model(folder)
    tok = og.Tokenizer(model)
    encoded = [int(i) for i in tok.encode(prompt)]
    if encoded != prompt_ids:
        raise SystemExit(f"genai's tokenizer encodes the prompt as {encoded}, tokenizers as {prompt_ids}")
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt_ids) + NEW_TOKENS)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(prompt_ids, dtype=np.int32))
    out = []
    while not gen.is_done():
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return out


def check_greedy(form, ids, margin):
    distinct = len(set(ids))
    if len(ids) != NEW_TOKENS:
        raise SystemExit(f"{form}: {len(ids)} greedy tokens, wanted {NEW_TOKENS}")
    if distinct < MIN_DISTINCT:
        raise SystemExit(f"{form}: greedy tokens have {distinct} distinct ids: {ids}")
    if CONFIG["eos_token_id"] in ids:
        raise SystemExit(f"{form}: greedy generation emits end-of-sequence: {ids}")
    if margin < MIN_MARGIN:
        raise SystemExit(f"{form}: a greedy step wins by only {margin:.4f} (< {MIN_MARGIN})")


def write_references(folder, decoder, prompt, prompt_ids, greedy_ids, steps):
    for k, (feeds, outs) in enumerate(steps[: 1 + DECODE_STEPS]):
        common.check_not_degenerate(os.path.basename(folder), outs)
        common.write_data_set(folder, k, feeds, outs)
    ref = {
        "prompt": prompt,
        "prompt_ids": prompt_ids,
        "greedy_ids": greedy_ids,
        "max_new_tokens": NEW_TOKENS,
        "inputs": decoder.inputs,
        "outputs": decoder.outputs,
    }
    # One key a line, each list on its line: readable, and a regeneration diffs by key.
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in ref.items())
    with open(os.path.join(folder, "reference.json"), "w") as f:
        f.write("{\n" + body + "\n}\n")


# ---------------------------------------------------------------------------------------------
# Reporting


def describe(folder):
    """Op types by domain, inputs and outputs with shapes, and opset imports of model.onnx."""
    model = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)

    def dims(v):
        t = v.type.tensor_type
        shape = ",".join(d.dim_param or str(d.dim_value) for d in t.shape.dim)
        return f"{v.name} {onnx.TensorProto.DataType.Name(t.elem_type).lower()}[{shape}]"

    ops = collections.Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)
    lines = [f"{os.path.basename(folder)}: ir {model.ir_version}, opsets "
             + ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)]
    for domain in sorted({d for d, _ in ops}):
        lines.append(f"  {domain}: " + ", ".join(f"{op} x{n}" for (d, op), n in sorted(ops.items())
                                                  if d == domain))
    lines.append("  inputs:  " + "; ".join(dims(v) for v in model.graph.input))
    lines.append("  outputs: " + "; ".join(dims(v) for v in model.graph.output))
    sizes = {n: os.path.getsize(os.path.join(folder, n)) for n in sorted(os.listdir(folder))
             if os.path.isfile(os.path.join(folder, n))}
    lines.append("  files: " + ", ".join(f"{n} {s}" for n, s in sizes.items()))
    return "\n".join(lines)


def folder_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def check_against_torch(model, decoder, prompt_ids):
    """The fp32 export has to agree with PyTorch itself, or the export is suspect."""
    feeds, outs, _, _ = decoder.step(list(prompt_ids), None)
    with torch.no_grad():
        want = model(torch.tensor([prompt_ids])).logits[0].numpy()
    got = dict(outs)["logits"][0]
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    if err > 1e-4:
        raise SystemExit(f"llama_optimum: onnxruntime and torch disagree on logits ({err:.2e})")
    return err


# ---------------------------------------------------------------------------------------------


def make_optimum(out_root, hf_dir, model, prompt_ids, torch_ids, optimum_python, work):
    """Form 1: Optimum's export, fp32, whose greedy tokens must equal PyTorch's."""
    opt_dir = export_optimum(hf_dir, os.path.join(work, "optimum"), optimum_python)
    folder = os.path.join(out_root, "llama_optimum")
    copy_files(opt_dir, folder, ["model.onnx", "config.json"])
    # Optimum copies the tokenizer only when its transformers can load it; take it from the source.
    shutil.copy(os.path.join(hf_dir, "tokenizer.json"), folder)
    dec = Decoder(os.path.join(folder, "model.onnx"))
    err = check_against_torch(model, dec, prompt_ids)
    ids, steps, margin = dec.greedy(prompt_ids, NEW_TOKENS)
    check_greedy("llama_optimum", ids, margin)
    if ids != torch_ids:
        raise SystemExit(f"llama_optimum: onnxruntime's greedy {ids} differs from torch's {torch_ids}")
    write_references(folder, dec, PROMPT, prompt_ids, ids, steps)
    print(f"llama_optimum: logits within {err:.1e} of torch; greedy margin >= {margin:.3f}; "
          f"{len(set(ids))} distinct ids, equal to torch's generate")
    return folder


def make_genai(out_root, hf_dir, prompt_ids, torch_ids, work):
    """Form 2: onnxruntime-genai's builder, int4; its Generator and the plain loop must agree."""
    genai_dir = export_genai(hf_dir, os.path.join(work, "genai"), os.path.join(work, "cache"))
    folder = os.path.join(out_root, "llama_genai")
    copy_files(genai_dir, folder, ["model.onnx", "model.onnx.data", "genai_config.json",
                                   "tokenizer.json", "tokenizer_config.json"])
    dec = Decoder(os.path.join(folder, "model.onnx"))
    ids, steps, margin = dec.greedy(prompt_ids, NEW_TOKENS)
    check_greedy("llama_genai", ids, margin)
    og_ids = genai_greedy(folder, PROMPT, prompt_ids)
    if og_ids != ids:
        raise SystemExit(f"llama_genai: onnxruntime-genai's greedy {og_ids} differs "
                         f"from the plain loop's {ids}")
    write_references(folder, dec, PROMPT, prompt_ids, og_ids, steps)
    # int4 weights move the logits enough that the tokens soon part from fp32's: expected.
    same = sum(a == b for a, b in zip(ids, torch_ids))
    print(f"llama_genai: greedy margin >= {margin:.3f}; {len(set(ids))} distinct ids, equal to the "
          f"plain onnxruntime loop's; {same}/{NEW_TOKENS} equal to fp32 torch's")
    return folder


def generate(out_root, optimum_python, work, lm_head_gain):
    tokenizer = make_tokenizer()
    prompt_ids = tokenizer.encode(PROMPT).ids
    if not 6 <= len(prompt_ids) <= 10:
        raise SystemExit(f"prompt {PROMPT!r} is {len(prompt_ids)} tokens, wanted about 8")
    hf_dir = os.path.join(work, "hf")
    model = make_hf_model(hf_dir, tokenizer, lm_head_gain)
    torch_ids = torch_greedy(model, prompt_ids)
    folders = [
        make_optimum(out_root, hf_dir, model, prompt_ids, torch_ids, optimum_python, work),
        make_genai(out_root, hf_dir, prompt_ids, torch_ids, work),
    ]
    print(f"prompt {PROMPT!r} -> {prompt_ids}")
    for folder in folders:
        print(describe(folder))
        with open(os.path.join(folder, "reference.json")) as f:
            print(f"  greedy: {json.load(f)['greedy_ids']}")
        size = folder_size(folder)
        print(f"  folder: {size} bytes")
        if size > MAX_FOLDER_BYTES:
            raise SystemExit(f"{folder}: {size} bytes, over {MAX_FOLDER_BYTES}")


def versions(optimum_python):
    import onnxruntime
    import onnxruntime_genai
    import transformers

    probe = ("import optimum.version as o, transformers as t, torch; print(f'optimum {o.__version__} "
             "(with transformers {t.__version__}, torch {torch.__version__})')")
    opt = run_checked([optimum_python, "-c", probe], "finding Optimum").stdout.strip()
    return (f"torch {torch.__version__}, transformers {transformers.__version__}, "
            f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
            f"onnxruntime-genai {onnxruntime_genai.__version__}; {opt}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(REPO, "tests", "models"))
    p.add_argument("--optimum-python", default=sys.executable,
                   help="a Python with optimum[onnx] installed (default: this one)")
    p.add_argument("--lm-head-gain", type=float, default=6.0,
                   help="spread of the output projection (logit scale), in units of 1/sqrt(hidden)")
    p.add_argument("--keep", help="keep the intermediate folders (HF checkpoint, raw exports) here")
    args = p.parse_args()
    if onnx.__version__ != "1.22.0":
        print(f"warning: onnx {onnx.__version__}, the committed models were made with 1.22.0",
              file=sys.stderr)
    print(versions(args.optimum_python))
    warnings.simplefilter("ignore")
    work = args.keep or tempfile.mkdtemp(prefix="vkml-llama-")
    os.makedirs(work, exist_ok=True)
    try:
        generate(args.out, args.optimum_python, work, args.lm_head_gain)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
