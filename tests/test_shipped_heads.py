"""Heads installed with the package: the default head of a drafter is the shipped one whose
target matches (shapes and tokenizer), head=random opts out, other targets get untrained
heads; the shipped files stay under 60 MB together (issue 21), each ships for SmolLM2, and each
decodes
exactly on the real model (EAGLE-3 in the default run, Medusa-1 and Hydra++ under `long`: their
chains are checked against plain decoding on tiny models in test_medusa.py and test_hydra.py)."""

import numpy as np
import pytest

from specjax import drafters
from specjax.heads import shipped
from specjax.heads.eagle import EagleHeadConfig, init_head
from specjax.heads.io import save_eagle_head


def test_default_head_is_the_matching_shipped_one(tiny_gguf, tmp_path, monkeypatch):
    from specjax.models.loaders import load

    lm = load(str(tiny_gguf))
    cfg = EagleHeadConfig.for_target(lm.model.cfg, "eagle3", draft_vocab=30)
    _, state, ids = init_head(cfg, lm.model, np.arange(30) * 3, seed=4)
    monkeypatch.setattr(shipped, "ROOT", tmp_path)
    save_eagle_head(tmp_path / "tiny-eagle3", cfg, state, ids, tokenizer=lm.tokenizer,
                    meta={"step": 11}, dtype="bfloat16")
    assert [p for p, _ in shipped.shipped_heads("eagle")] == [str(tmp_path / "tiny-eagle3")]
    assert shipped.shipped_heads("medusa") == []
    d = drafters.make("eagle", lm)
    assert "tiny-eagle3" in d.description and "(step 11)" in d.description
    assert np.array_equal(np.asarray(d.params()["draft_ids"]), np.arange(30) * 3)
    r = drafters.make("eagle", lm, head="random")
    assert r.description.startswith("untrained")
    # the same shapes without a tokenizer (a random model): no shipped head applies
    assert drafters.make("eagle", lm.model).description.startswith("untrained")
    # another tokenizer: no match
    monkeypatch.setattr(shipped, "tokenizer_sha256", lambda tok: "0" * 64)
    assert drafters.make("eagle", lm).description.startswith("untrained")


def test_shipped_heads_stay_under_60_mb():
    # the wheel carries them: EAGLE-3 19.7 MB and Medusa-1 11.5 MB (bfloat16), Hydra++ 20.4 MB
    # (int8 rows since 2026-11-28; 40.5 MB in bfloat16)
    total = sum(f.stat().st_size for f in shipped.ROOT.rglob("*") if f.is_file()) \
        if shipped.ROOT.is_dir() else 0
    assert total < 60 * 10 ** 6, f"shipped heads take {total / 10 ** 6:.1f} MB"


@pytest.mark.real_model
def test_every_shipped_head_is_for_smollm2_and_loads(smollm2):
    heads = shipped.shipped_heads()
    assert {c["format"] for _, c in heads} >= {"specjax-eagle-1", "specjax-medusa-1",
                                                "specjax-hydra-1", "specjax-acceptance-1"}
    for kind in ("eagle", "medusa", "hydra"):
        path = shipped.find_shipped(kind, smollm2.model, smollm2.tokenizer)
        assert path is not None, f"no {kind} head matches SmolLM2"
        # the default drafter loads it (shapes checked against its config and the target)
        assert path in drafters.make(kind, smollm2).description


@pytest.mark.real_model
@pytest.mark.parametrize("kind", [
    "eagle", pytest.param("medusa", marks=pytest.mark.long),
    pytest.param("hydra", marks=pytest.mark.long)])
def test_shipped_heads_decode_exactly_on_smollm2(smollm2, kind):
    path = shipped.find_shipped(kind, smollm2.model, smollm2.tokenizer)
    if path is None:
        pytest.skip(f"no {kind} head ships for SmolLM2 yet")
    from specjax.engine import generate

    prompts = [smollm2.tokenizer.encode(p) for p in
               ("The capital of France is", "def fibonacci(n):", "List three colors:")]
    ref = generate(smollm2.model, prompts, max_new_tokens=24, batch_size=3).tokens
    # the chain, and the tree `eagle` and `medusa` draft by default at batch 1 when greedy;
    # other trees with trained heads are covered on tiny models (test_eagle.py)
    from specjax.methods import GREEDY_B1_DEFAULTS

    default_tree = GREEDY_B1_DEFAULTS.get(kind, {}).get("tree")
    for tree in (None,) + ((default_tree,) if default_tree else ()):
        d = drafters.make(kind, smollm2, **({"tree": tree} if tree else {}))
        assert path in d.description
        res = generate(smollm2.model, prompts, max_new_tokens=24, batch_size=3, drafter=d)
        assert res.tokens == ref
        assert sum(res.extra["accepted"]) > 0  # a trained head gets tokens accepted



@pytest.mark.long  # suite time (32 s): `make demo` runs the real thing at every stop
def test_demo_compares_several_methods(tiny_gguf, capsys):
    from specjax.cli import main

    assert main(["demo", "--model", str(tiny_gguf), "--max-new-tokens", "4", "--methods",
                 "prompt_lookup,eagle", "--method-arg", "eagle.head=random",
                 "--method-arg", "k=2", "--numerics", "fast"]) == 0
    out = capsys.readouterr().out
    summary = out[out.index("summary"):]
    for name in ("ar", "prompt_lookup", "eagle"):
        assert f"\n  {name} " in summary
    assert "NOT identical" not in summary and "untrained eagle3 head" in summary
    assert "tree " not in summary  # k given: the chain (a tree is named in the summary)
    assert main(["demo", "--model", str(tiny_gguf), "--methods", "eagle",
                 "--method-arg", "medusa.k=2"]) == 2
    assert "does not run" in capsys.readouterr().err
