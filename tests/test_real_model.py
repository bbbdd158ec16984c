"""The real SmolLM2-135M-Instruct GGUF against Hugging Face transformers on the same file.

transformers reads the GGUF itself (its own dequantization and its own undoing of llama.cpp's
Q/K permutation) and builds its tokenizer from the GGUF metadata, so weights, rotary layout and
tokenizer are checked against an independent implementation.
"""

import numpy as np
import pytest

from specjax.engine import generate

pytestmark = pytest.mark.real_model

PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Summarize: the quick brown fox jumps over the lazy dog, twice, on 12 March 2024.",
]


@pytest.fixture(scope="module")
def hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from specjax.models.loaders import resolve_preset

    path = resolve_preset("smollm2-135m")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32)
    model.eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, tok


def test_config_and_tokenizer_facts(smollm2):
    cfg = smollm2.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == (30, 576, 9, 3)
    assert cfg.tie_embeddings and cfg.vocab_size == 49152 and cfg.rope_theta == 100000.0
    assert 134e6 < cfg.num_params < 136e6
    tok = smollm2.tokenizer
    assert tok.eos_ids == (2,) and tok.id_to_token(2) == "<|im_end|>"


def test_random_preset_has_the_real_shape(smollm2):
    """``random:smollm2-135m`` (timings without the weights) has the checkpoint's config."""
    from specjax.models.loaders import preset_config

    assert preset_config("smollm2-135m") == smollm2.config


def test_tokenizer_matches_transformers(smollm2, hf):
    _, htok = hf
    texts = PROMPTS + ["héllo wörld 你好 🙂\n\tx = 12345;  ", "  leading spaces and 3.14159",
                       "<|im_start|>user\nhi<|im_end|>"]
    for t in texts:
        assert smollm2.tokenizer.encode(t) == htok.encode(t, add_special_tokens=False), t


def test_tokenizer_round_trip_unicode(smollm2):
    tok = smollm2.tokenizer
    rng = np.random.default_rng(0)
    # random code points from several planes, including combining marks and emoji
    pools = [range(0x20, 0x7F), range(0xA0, 0x2FF), range(0x370, 0x3FF), range(0x4E00, 0x4FFF),
             range(0x1F300, 0x1F64F), [0x0301, 0x200D, 0x0A, 0x09]]
    for _ in range(50):
        s = "".join(chr(int(rng.choice(list(pools[rng.integers(len(pools))]))))
                    for _ in range(rng.integers(1, 40)))
        assert tok.decode(tok.encode(s), skip_special_tokens=False) == s
    assert [t for t in tok.encode("12345")] == [tok.encode(c)[0] for c in "12345"]


def test_chat_template_matches_transformers(smollm2, hf):
    _, htok = hf
    msgs = [{"role": "user", "content": "Hello there"}]
    ours = smollm2.tokenizer.apply_chat_template(msgs)
    theirs = htok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert ours == theirs
    assert ours.endswith("<|im_start|>assistant\n")


def test_logits_match_transformers(smollm2, hf):
    import jax.numpy as jnp
    import torch

    model, _ = hf
    for text in PROMPTS:
        ids = smollm2.tokenizer.encode_chat(text)
        T = len(ids)
        out = smollm2.model(jnp.asarray([ids]), jnp.arange(T)[None],
                            smollm2.model.init_cache(1, T))
        with torch.no_grad():
            ref = model(torch.tensor([ids])).logits[0].numpy()
        got = np.asarray(out.logits[0])
        # float32 end to end; logits reach |40|: 1e-3 absolute covers summation-order noise
        np.testing.assert_allclose(got, ref, atol=1e-3, rtol=0)
        assert (got.argmax(-1) == ref.argmax(-1)).all()


@pytest.mark.long  # 32 s (suite time): the logits' parity above and every method's batched
# identity below keep transformers parity and greedy decoding in the default run
def test_greedy_32_tokens_match_transformers(smollm2, hf):
    import torch

    model, _ = hf
    ids = [smollm2.tokenizer.encode_chat(t) for t in PROMPTS]
    res = generate(smollm2.model, ids, max_new_tokens=32, batch_size=3)
    for p, got in zip(ids, res.tokens):
        with torch.no_grad():
            ref = model.generate(torch.tensor([p]), max_new_tokens=32, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)[0, len(p):].tolist()
        assert got == ref


SPEC_PROMPTS = PROMPTS + [
    "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat."]


@pytest.fixture(scope="module")
def plain_one_by_one(smollm2):
    """Plain greedy decoding of each chat prompt alone (batch 1): the reference."""
    ids = [smollm2.tokenizer.encode_chat(t) for t in SPEC_PROMPTS]
    eos = smollm2.tokenizer.eos_ids
    return ids, generate(smollm2.model, ids, max_new_tokens=24, batch_size=1, eos_ids=eos,
                         cache_len=128).tokens


# the self-speculative drafters are checked on tiny models in the default run and here under
# `-m long` (the default run must stay under 20 minutes on CI's 2 cores)
# (draft_model too: tests/test_speculative.py checks it at batch 1, 3 and 8 on tiny models)
# (2026-11-27, suite time) prompt lookup too: the real model's greedy identity runs by default
# with the shipped EAGLE-3 head (tests/test_shipped_heads.py), prompt lookup's on tiny models
@pytest.mark.parametrize("method", [pytest.param("prompt_lookup", marks=pytest.mark.long),
                                    pytest.param("draft_model", marks=pytest.mark.long),
                                    pytest.param("early_exit", marks=pytest.mark.long),
                                    pytest.param("layer_skip", marks=pytest.mark.long)])
def test_every_method_batched_matches_plain_decoding(smollm2, plain_one_by_one, method):
    """Each method with its default settings, 4 chat prompts of different lengths decoded
    together (ragged acceptance: rows finish at different steps): token for token what plain
    decoding gives each prompt alone."""
    from specjax.methods import build

    ids, ref = plain_one_by_one
    drafter, policy, verifier = build(method, smollm2)
    res = generate(smollm2.model, ids, max_new_tokens=24, batch_size=4, cache_len=128,
                   eos_ids=smollm2.tokenizer.eos_ids, drafter=drafter, policy=policy,
                   verifier=verifier)
    assert res.tokens == ref
    assert sum(res.extra["drafted"]) > 0
