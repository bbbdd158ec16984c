"""The ``--peer hf`` runners: Hugging Face transformers decoding the same weights (dense
float32 PyTorch), timed in the same interleaved loop. torch and transformers are imported on
first use (``pip install -e '.[bench]'``)."""

from __future__ import annotations

import time

import numpy as np

from specjax.errors import BenchError


def _peer_runner(lm, kind: str, max_new: int, eos_ids, temperature: float = 0.0,
                 seed: int = 0):
    """Hugging Face transformers on the same (dequantized) weights: dense float32 PyTorch.
    ``temperature > 0`` samples from the plain temperature-scaled distribution (transformers'
    default top-k of 50 is switched off), as specjax's methods do in the same run."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise BenchError("--peer hf needs torch and transformers (pip install -e '.[bench]')"
                         ) from e
    model = dense_hf_model(lm)
    gen_kwargs = dict(max_new_tokens=max_new, do_sample=False, pad_token_id=0,
                      eos_token_id=list(eos_ids) or None)
    if temperature > 0:
        gen_kwargs.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
        torch.manual_seed(seed)
    if kind == "hf_prompt_lookup":
        gen_kwargs["prompt_lookup_num_tokens"] = 10

    def run(prompts: list[list[int]]):
        toks, walls = [], 0.0
        for p in prompts:  # transformers' prompt lookup supports batch size 1 only
            with torch.no_grad():
                t0 = time.perf_counter()
                out = model.generate(torch.tensor([p]), **gen_kwargs)
                walls += time.perf_counter() - t0
            toks.append(out[0, len(p):].tolist())
        return toks, walls

    return run


def dense_hf_model(lm):
    """A transformers LlamaForCausalLM (float32, PyTorch CPU) holding ``lm``'s weights."""
    import torch
    import transformers

    from specjax.models.weights import model_to_tensors

    cfg = lm.config
    if cfg.architecture != "llama":
        raise BenchError(f"--peer hf supports llama-architecture models, not {cfg.architecture}")
    extra = {}
    rs = cfg.rope_scaling
    if rs is not None and rs.kind == "factors":
        raise BenchError("--peer hf cannot rebuild a model whose rotary embeddings use "
                         "per-frequency factors (a GGUF rope_freqs tensor)")
    if rs is not None:  # transformers reads the same dict from rope_scaling (4.x and 5.x)
        extra["rope_scaling"] = {"rope_type": rs.kind, "factor": rs.factor}
        if rs.kind == "llama3":
            extra["rope_scaling"].update(
                low_freq_factor=rs.low_freq_factor, high_freq_factor=rs.high_freq_factor,
                original_max_position_embeddings=rs.original_max_position)
    hf_cfg = transformers.LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, rope_theta=cfg.rope_theta, rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        max_position_embeddings=cfg.max_position_embeddings, **extra)
    model = transformers.LlamaForCausalLM(hf_cfg)
    sd = {k: torch.from_numpy(np.array(v)) for k, v in model_to_tensors(lm.model).items()}
    if cfg.tie_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd, strict=True)
    model.eval()
    return model
