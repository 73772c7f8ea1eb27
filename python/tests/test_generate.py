"""vkml.Generator on the tiny Llama exports of tests/models (random weights), against the
greedy tokens of onnxruntime's own generation loop (reference.json, tests/generate/)."""

import json

import pytest

import vkml
from conftest import MODELS

FORMS = ["llama_genai", "llama_optimum"]


def reference(form):
    return json.loads((MODELS / form / "reference.json").read_text())


@pytest.mark.parametrize("form", FORMS)
def test_greedy_generation_matches_onnxruntime(form, providers):
    r = reference(form)
    gen = vkml.Generator(MODELS / form, providers=providers)
    out = gen.generate(r["prompt_ids"], max_new_tokens=len(r["greedy_ids"]), ignore_eos=True)
    assert out["tokens"] == r["greedy_ids"]
    assert out["prompt_tokens"] == len(r["prompt_ids"])
    assert out["decode_tokens_per_s"] > 0


def test_a_text_prompt_streams_its_text():
    r = reference("llama_genai")
    gen = vkml.Generator(MODELS / "llama_genai", providers=["CPUExecutionProvider"])
    pieces = []
    out = gen.generate(r["prompt"], max_new_tokens=len(r["greedy_ids"]), ignore_eos=True,
                       on_text=pieces.append)
    # The prompt's text encodes to the reference's ids, so the tokens are the reference's.
    assert out["tokens"] == r["greedy_ids"]
    assert "".join(pieces) == out["text"]


def test_sampling_is_seeded_and_bad_settings_are_refused():
    gen = vkml.Generator(MODELS / "llama_genai", providers=["CPUExecutionProvider"])
    ids = reference("llama_genai")["prompt_ids"]
    a = gen.generate(ids, max_new_tokens=8, temperature=1.0, top_p=0.9, seed=7, ignore_eos=True)
    b = gen.generate(ids, max_new_tokens=8, temperature=1.0, top_p=0.9, seed=7, ignore_eos=True)
    assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 8
    with pytest.raises(vkml.InvalidInput, match="top_p"):
        gen.generate(ids, top_p=0.0)
    with pytest.raises(vkml.InvalidInput, match="empty"):
        gen.generate([], max_new_tokens=4)
    with pytest.raises(vkml.InvalidModel, match="no_such_model"):
        vkml.Generator(MODELS / "no_such_model", providers=["CPUExecutionProvider"])
    # A model without a tokenizer beside it.
    with pytest.raises(vkml.InvalidModel, match="tokenizer"):
        vkml.Generator(MODELS / "bert_static", providers=["CPUExecutionProvider"])
