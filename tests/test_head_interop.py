"""EAGLE-3 heads in the serving engines' layout (vLLM, SGLang, SpecForge): export, import,
round trips, bfloat16 files, the same drafts after a round trip, and clear errors."""

import json

import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file
from spec_helpers import make_target, mixed_prompts

from specjax import drafters
from specjax.engine import generate
from specjax.errors import CheckpointError
from specjax.heads.eagle import EagleHeadConfig, init_head
from specjax.heads.interop import export_eagle3, import_eagle3
from specjax.heads.io import load_eagle_head, save_eagle_head


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def head(target):
    cfg = EagleHeadConfig.for_target(target.cfg, "eagle3", draft_vocab=40)
    ids = np.random.default_rng(0).permutation(target.cfg.vocab_size)[:40]
    graphdef, state, draft_ids = init_head(cfg, target, ids, seed=3)
    # non-trivial norms, so a swapped norm would show
    flat = nnx.to_flat_state(state)
    rng = np.random.default_rng(1)
    for path, leaf in flat:
        if "norm" in str(path[-1]) and str(path[-1]) != "attn_norm":
            leaf.set_value(np.asarray(1 + 0.1 * rng.standard_normal(leaf.get_value().shape),
                                      np.float32))
    return cfg, nnx.from_flat_state(flat), draft_ids


def _weights(state):
    return {".".join(map(str, p)): np.asarray(leaf.get_value())
            for p, leaf in nnx.to_flat_state(state)}


def test_engine_layout_names_shapes_and_maps(target, head, tmp_path):
    cfg, state, ids = head
    out = export_eagle3(tmp_path / "e", cfg, state, ids, dtype="float32")
    conf = json.loads((out / "config.json").read_text())
    assert conf["architectures"] == ["LlamaForCausalLMEagle3"]
    assert conf["draft_vocab_size"] == 40 and conf["num_hidden_layers"] == 1
    assert conf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == \
        [i + 1 for i in cfg.feature_layers]
    t = load_file(str(out / "model.safetensors"))
    h = cfg.hidden_size
    assert t["fc.weight"].shape == (h, 3 * h)
    assert t["midlayer.self_attn.q_proj.weight"].shape == (cfg.num_heads * cfg.head_dim, 2 * h)
    assert t["midlayer.self_attn.k_proj.weight"].shape == \
        (cfg.num_kv_heads * cfg.head_dim, 2 * h)
    # target id = draft id + d2t[draft id]; ordered by target id; t2d marks the same ids
    tid = np.arange(40) + t["d2t"]
    assert np.array_equal(tid, np.sort(ids)) and t["d2t"].dtype == np.int64
    assert np.array_equal(np.flatnonzero(t["t2d"]), np.sort(ids))
    # each LM head row still belongs to its target token
    w = _weights(state)
    row_of = {int(i): r for i, r in zip(ids, w["lm_head"])}
    for j, i in enumerate(tid):
        assert np.array_equal(t["lm_head.weight"][j], row_of[int(i)])
    assert np.array_equal(t["midlayer.hidden_norm.weight"], w["hid_norm"])
    assert np.array_equal(t["midlayer.input_layernorm.weight"], w["emb_norm"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_round_trip_drafts_the_same(target, head, tmp_path, dtype):
    """specjax -> engine layout -> specjax: the same weights (to bf16 rounding) and, in float32,
    the same drafts and outputs as the original head."""
    cfg, state, ids = head
    eng = export_eagle3(tmp_path / "eng", cfg, state, ids, dtype=dtype)
    cfg2, _, state2, ids2, desc = load_eagle_head(eng, target)  # load_eagle_head dispatches
    assert "engine layout" in desc and cfg2 == cfg
    a, b = _weights(state), _weights(state2)
    order = np.argsort(ids)
    assert np.array_equal(ids2, np.asarray(ids)[order])
    tol = 0 if dtype == "float32" else 1e-2
    for k in a:
        if k == "attn_norm":  # not part of an EAGLE-3 layer (specjax's EAGLE-1 uses it)
            continue
        want = a[k][order] if k == "lm_head" else a[k]
        np.testing.assert_allclose(b[k], want, rtol=tol, atol=tol * 0.05)
    back = save_eagle_head(tmp_path / "back", cfg2, state2, ids2, dtype=dtype)
    cfg3, _, state3, ids3, _ = load_eagle_head(back, target)
    assert cfg3 == cfg and np.array_equal(ids3, ids2)
    for k, v in _weights(state3).items():
        assert np.array_equal(v, b[k])
    if dtype == "float32":
        prompts = mixed_prompts(3, seed=4)
        plain = generate(target, prompts, max_new_tokens=8, batch_size=3).tokens
        orig = save_eagle_head(tmp_path / "orig", cfg, state, ids)
        r = [generate(target, prompts, max_new_tokens=8, batch_size=3,
                      drafter=drafters.make("eagle", target, k=3, head=str(p)))
             for p in (orig, eng)]
        assert r[0].tokens == r[1].tokens == plain
        assert r[0].extra["accepted"] == r[1].extra["accepted"]


def test_bf16_file_is_half_the_size(target, head, tmp_path):
    cfg, state, ids = head
    f32 = save_eagle_head(tmp_path / "a", cfg, state, ids) / "model.safetensors"
    b16 = save_eagle_head(tmp_path / "b", cfg, state, ids, dtype="bfloat16") / \
        "model.safetensors"
    assert b16.stat().st_size < 0.6 * f32.stat().st_size


def test_import_errors_name_the_problem(target, head, tmp_path):
    cfg, state, ids = head
    eng = export_eagle3(tmp_path / "e", cfg, state, ids, dtype="float32")
    conf_f, w_f = eng / "config.json", eng / "model.safetensors"
    conf = json.loads(conf_f.read_text())
    tensors = load_file(str(w_f))

    def with_conf(**kw):
        conf_f.write_text(json.dumps({**conf, **kw}))

    with_conf(hidden_size=cfg.hidden_size * 2)
    with pytest.raises(CheckpointError, match="hidden_size = .*the loaded target has"):
        import_eagle3(eng, target)
    with_conf(vocab_size=cfg.vocab_size + 1)
    with pytest.raises(CheckpointError, match="vocab_size"):
        import_eagle3(eng, target)
    with_conf(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 99]})
    with pytest.raises(CheckpointError, match="eagle_aux_hidden_state_layer_ids"):
        import_eagle3(eng, target)
    with_conf(num_hidden_layers=2)
    with pytest.raises(CheckpointError, match="2 decoder layers"):
        import_eagle3(eng, target)
    with_conf()
    bad = dict(tensors)
    bad["d2t"] = np.full((40,), 10_000, np.int64)
    save_file(bad, str(w_f))
    with pytest.raises(CheckpointError, match="d2t maps draft ids to target ids outside"):
        import_eagle3(eng, target)
    bad = {k: v for k, v in tensors.items() if k != "midlayer.mlp.up_proj.weight"}
    save_file(bad, str(w_f))
    with pytest.raises(CheckpointError, match="missing tensor midlayer.mlp.up_proj.weight"):
        import_eagle3(eng, target)
    bad = dict(tensors)
    bad["fc.weight"] = bad["fc.weight"][:, :-1]
    save_file(bad, str(w_f))
    with pytest.raises(CheckpointError, match="fc.weight has shape"):
        import_eagle3(eng, target)
    w_f.write_bytes(w_f.read_bytes()[:64])
    with pytest.raises(CheckpointError, match="unreadable or truncated"):
        load_eagle_head(eng, target)
    e1 = EagleHeadConfig.for_target(target.cfg, "eagle1", draft_vocab=40)
    _, s1, i1 = init_head(e1, target, ids, seed=0)
    with pytest.raises(CheckpointError, match="only eagle3 heads"):
        export_eagle3(tmp_path / "e1", e1, s1, i1)


def test_a_head_for_another_target_of_the_same_shape_loads(target, head, tmp_path):
    """Heads are tied to a target's shapes, not to its weights: the same architecture with
    other weights loads the file (and still decodes exactly)."""
    from spec_helpers import CFG

    from specjax.models.loaders import random_model

    cfg, state, ids = head
    eng = export_eagle3(tmp_path / "e", cfg, state, ids, dtype="float32")
    other = random_model(CFG, seed=99)
    d = drafters.make("eagle", other, k=3, head=str(eng))
    prompts = mixed_prompts(2, seed=5)
    assert generate(other, prompts, max_new_tokens=6, drafter=d, batch_size=2).tokens == \
        generate(other, prompts, max_new_tokens=6, batch_size=2).tokens


def test_cli_head_convert_both_ways(tiny_gguf, tmp_path, capsys):
    """``specjax head convert``: specjax -> engine layout -> specjax, checked against the
    target the flags load (a tiny GGUF with a tokenizer)."""
    from specjax.cli import main
    from specjax.models.loaders import load

    lm = load(str(tiny_gguf))
    cfg = EagleHeadConfig.for_target(lm.model.cfg, "eagle3", draft_vocab=30)
    _, state, ids = init_head(cfg, lm.model, np.arange(30) * 2, seed=1)
    src = save_eagle_head(tmp_path / "src", cfg, state, ids, tokenizer=lm.tokenizer)
    assert main(["head", "convert", str(src), str(tmp_path / "eng"), "--model",
                 str(tiny_gguf)]) == 0
    assert "engine format" in capsys.readouterr().out
    conf = json.loads((tmp_path / "eng" / "config.json").read_text())
    assert conf["architectures"] == ["LlamaForCausalLMEagle3"]
    assert main(["head", "convert", str(tmp_path / "eng"), str(tmp_path / "back"), "--model",
                 str(tiny_gguf), "--out-dtype", "float32"]) == 0
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back["format"] == "specjax-eagle-1"
    _, _, s2, ids2, _ = load_eagle_head(tmp_path / "back", lm.model, lm.tokenizer)
    assert np.array_equal(ids2, np.arange(30) * 2)
    w = _weights(state)
    for k, v in _weights(s2).items():  # bf16 in between: equal to rounding
        if k != "attn_norm":
            np.testing.assert_allclose(v, w[k], rtol=1e-2, atol=1e-3)
    assert main(["head", "convert", str(tmp_path / "nothing"), str(tmp_path / "x"),
                 "--model", str(tiny_gguf)]) == 2
    assert "not a readable head config" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_cli_head_convert_medusa_and_hydra_dtype(kind, tiny_gguf, tmp_path, capsys):
    """``specjax head convert --to specjax --out-dtype`` rewrites Medusa and Hydra heads
    (float32 -> bfloat16, equal to rounding, loadable); they have no engine layout, which
    ``--to engine`` says."""
    from specjax.cli import main
    from specjax.heads import hydra, medusa
    from specjax.models.loaders import load

    lm = load(str(tiny_gguf))
    t = lm.model.cfg
    ids = np.arange(30) * 2
    if kind == "medusa":
        cfg = medusa.MedusaHeadConfig(num_heads=2, hidden_size=t.hidden_size,
                                      vocab_size=t.vocab_size, draft_vocab=30,
                                      target_layers=t.num_layers)
        _, state = medusa.init_medusa_heads(cfg, lm.model, ids)
        save, load_fn = medusa.save_medusa_heads, medusa.load_medusa_heads
    else:
        cfg = hydra.HydraHeadConfig.for_target(t, 2, 30)
        _, state = hydra.init_hydra_heads(cfg, lm.model, ids, seed=1)
        save, load_fn = hydra.save_hydra_heads, hydra.load_hydra_heads
    src = save(tmp_path / "src", cfg, state, ids, tokenizer=lm.tokenizer)
    assert main(["head", "convert", str(src), str(tmp_path / "bf16"), "--model",
                 str(tiny_gguf), "--to", "specjax"]) == 0
    assert "bfloat16" in capsys.readouterr().out
    cfg2, _, s2, ids2, _ = load_fn(tmp_path / "bf16", lm.model, lm.tokenizer)
    assert cfg2 == cfg and np.array_equal(ids2, ids)
    w = _weights(state)
    for k, v in _weights(s2).items():
        np.testing.assert_allclose(v, w[k], rtol=1e-2, atol=1e-3)
    assert (tmp_path / "bf16" / "model.safetensors").stat().st_size < \
        0.6 * (src / "model.safetensors").stat().st_size
    assert main(["head", "convert", str(src), str(tmp_path / "eng"), "--model",
                 str(tiny_gguf), "--to", "engine"]) == 2
    assert "no serving-engine layout" in capsys.readouterr().err


# ----------------------------------------------------------------------------- int8 storage


def test_int8_rows_are_within_half_a_step_and_small_tensors_stay_bfloat16():
    from specjax.heads import files

    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 40, 600)).astype(np.float32) * np.linspace(0.01, 3, 40)[:, None]
    w[1, 5] = 0.0  # an all-zero row
    q, scale = files.quantize_rows(w)
    assert q.dtype == np.int8 and scale.shape == (3, 40, 1) and scale[1, 5, 0] == 1.0
    assert np.all(np.abs(q.astype(np.float32) * scale - w) <= scale / 2 + 1e-7)
    t = files.storage_tensors({"big": w, "norm": np.ones(600, np.float32)}, "int8")
    assert t["big"].dtype == np.int8 and str(t["norm"].dtype) == "bfloat16"
    assert set(t) == {"big", "big" + files.INT8_SCALE, "norm"}
    back = files.dequantize_tensors(t, "f")
    np.testing.assert_allclose(back["big"], w, atol=float(scale.max()) / 2 + 1e-7)
    with pytest.raises(CheckpointError, match="dtype must be one of"):
        files.storage_tensors({"big": w}, "int4")


def test_int8_files_with_a_broken_scale_are_refused():
    from specjax.heads import files

    q, s = files.quantize_rows(np.ones((4, 8), np.float32))
    S = files.INT8_SCALE
    cases = [({"w": q}, "has no scale"),
             ({"w" + S: s}, "has no int8 tensor"),
             ({"w": q, "w" + S: s[:2]}, "do not form int8 rows"),
             ({"w": q, "w" + S: -s}, "do not form int8 rows"),
             ({"w": q.astype(np.float32), "w" + S: s}, "do not form int8 rows")]
    for tensors, msg in cases:
        with pytest.raises(CheckpointError, match=msg) as e:
            files.dequantize_tensors(tensors, "heads/model.safetensors")
        assert "heads/model.safetensors" in str(e.value)


def test_cli_head_convert_hydra_to_int8(tiny_gguf, tmp_path, capsys,
                                                         monkeypatch):
    """``--out-dtype int8``: a Hydra head rewritten as int8 rows loads (every row within half
    a quantization step), is smaller than bfloat16 and builds a drafter; the engine layout
    refuses int8."""
    from specjax.cli import main
    from specjax.heads import files, hydra
    from specjax.models.loaders import load

    monkeypatch.setattr(files, "INT8_MIN_SIZE", 256)  # the tiny head's matrices are small
    lm = load(str(tiny_gguf))
    ids = np.arange(30) * 2
    cfg = hydra.HydraHeadConfig.for_target(lm.model.cfg, 2, 30)
    _, state = hydra.init_hydra_heads(cfg, lm.model, ids, seed=1)
    src = hydra.save_hydra_heads(tmp_path / "src", cfg, state, ids, tokenizer=lm.tokenizer)
    for dt in ("bfloat16", "int8"):
        assert main(["head", "convert", str(src), str(tmp_path / dt), "--model",
                     str(tiny_gguf), "--to", "specjax", "--out-dtype", dt]) == 0
    assert "int8" in capsys.readouterr().out
    raw = load_file(str(tmp_path / "int8" / "model.safetensors"))
    assert any(v.dtype == np.int8 for v in raw.values())
    conf = json.loads((tmp_path / "int8" / "config.json").read_text())
    assert conf["meta"]["storage_dtype"] == "int8"
    assert (tmp_path / "int8" / "model.safetensors").stat().st_size < \
        0.75 * (tmp_path / "bfloat16" / "model.safetensors").stat().st_size
    cfg2, _, s2, ids2, _ = hydra.load_hydra_heads(tmp_path / "int8", lm.model, lm.tokenizer)
    assert cfg2 == cfg and np.array_equal(ids2, ids)
    w = _weights(state)
    for k, v in _weights(s2).items():
        step = np.max(np.abs(w[k]), axis=-1, keepdims=True) / 127 if w[k].ndim >= 2 else 0
        np.testing.assert_allclose(v, w[k], rtol=1e-2, atol=float(np.max(step)) / 2 + 1e-3)
    # the drafter takes it as any head file (what it drafts is verified like any draft:
    # Hydra's identity with plain decoding is test_hydra.py's, the shipped int8 head's on
    # SmolLM2 test_shipped_heads.py's)
    assert "hydra" in drafters.make("hydra", lm.model, k=2,
                                    head=str(tmp_path / "int8")).description
    ecfg = EagleHeadConfig.for_target(lm.model.cfg, "eagle3", draft_vocab=30)
    _, estate, eids = init_head(ecfg, lm.model, ids, seed=1)
    esrc = save_eagle_head(tmp_path / "eagle", ecfg, estate, eids, tokenizer=lm.tokenizer)
    assert main(["head", "convert", str(esrc), str(tmp_path / "eng"), "--model",
                 str(tiny_gguf), "--out-dtype", "int8"]) == 2
    assert "--out-dtype int8 is specjax's own head format" in capsys.readouterr().err
