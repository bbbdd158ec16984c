"""The specjax command line."""

import json
import os
import tomllib
from pathlib import Path

import pytest

from specjax.cli import CLIError, main, read_prompts

ROOT = Path(__file__).resolve().parents[1]


def test_read_prompts_formats_and_errors(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prompt": "hi"}\n\n{"question_id": 7, "category": "qa", '
                 '"turns": ["first", "second"]}\n')
    assert read_prompts(str(f)) == [{"id": "a", "prompt": "hi"},
                                    {"id": 7, "prompt": "first", "category": "qa"}]
    f.write_text('{"id": 1, "prompt": "ok"}\n{"id": 2, "prompt": \n')
    with pytest.raises(CLIError, match=r"p.jsonl:2: invalid JSON"):
        read_prompts(str(f))
    f.write_text('{"id": 1, "text": "no prompt"}\n')
    with pytest.raises(CLIError, match=r"p.jsonl:1: needs a 'prompt' or a 'turns' field"):
        read_prompts(str(f))
    with pytest.raises(CLIError, match="not found"):
        read_prompts(str(tmp_path / "missing.jsonl"))


def test_cli_errors_are_clear(capsys, tmp_path):
    assert main(["generate", "--model", "no-such-model", "--prompt", "x"]) == 2
    assert "neither a preset" in capsys.readouterr().err
    assert main(["generate", "--method", "telepathy", "--prompt", "x"]) == 2
    assert "--method 'telepathy' is not available" in capsys.readouterr().err
    assert main(["generate", "--temperature", "-1", "--prompt", "x"]) == 2
    assert "temperature must be" in capsys.readouterr().err
    assert main(["generate", "--quantize", "int4", "--prompt", "x"]) == 2
    assert "--quantize must be none or w8a8" in capsys.readouterr().err
    assert main(["generate", "--model", "random:smollm2-135m", "--prompt", "x"]) == 2
    assert "random weights and no tokenizer" in capsys.readouterr().err
    assert main(["info", "--model", "random:smollm2-135m"]) == 0  # info needs no tokenizer
    assert json.loads(capsys.readouterr().out)["config"]["num_layers"] == 30


@pytest.mark.real_model
def test_cli_generate_and_info(tmp_path, capsys, tiny_gguf):
    """`generate` on a tiny GGUF checkpoint with a tokenizer (suite time: the real model's
    end-to-end CLI run is under -m long, test_cli_speculative_method_matches_ar), `info` on the
    default model."""
    pf = tmp_path / "p.jsonl"
    pf.write_text('{"id": "q1", "prompt": "What is 2+2?"}\n'
                  '{"question_id": 5, "turns": ["Name a color."]}\n')
    out = tmp_path / "out.jsonl"
    rc = main(["generate", "--model", str(tiny_gguf), "--prompts", str(pf),
               "--max-new-tokens", "8", "--batch-size", "2", "--output", str(out), "--quiet"])
    assert rc == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["q1", 5]
    for r in recs:
        assert set(r) >= {"id", "prompt_ids", "output_ids", "text", "new_tokens",
                          "target_forwards", "wall_s"}
        assert r["new_tokens"] == len(r["output_ids"]) <= 8
        assert r["target_forwards"] == r["new_tokens"]
    assert "tokens/s" in capsys.readouterr().err
    assert main(["info"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["architecture"] == "llama" and info["tokenizer"]["vocab_size"] == 49152


def test_generate_reuses_compiled_programs_across_processes(tmp_path, tiny_gguf):
    """`generate` saves its compiled programs in the persistent compilation cache and a second
    process loads its decode loop (JAX logs the hit) with the same output."""
    import subprocess
    import sys

    cache = tmp_path / "cc"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(SPECJAX_COMPILE_CACHE=str(cache), JAX_LOG_COMPILES="1",
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    cmd = [sys.executable, "-m", "specjax.cli", "generate", "--model", str(tiny_gguf),
           "--prompt", "What is 2+2?", "--max-new-tokens", "6", "--quiet"]

    def run():
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600,
                           cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.splitlines()[-1])["output_ids"], r.stderr

    first, log1 = run()
    loop_hit = "Persistent compilation cache hit for 'jit_run_jit'"  # the decode loop
    assert any(p.name.startswith("jit_run_jit") for p in cache.iterdir())
    assert loop_hit not in log1
    second, log2 = run()
    assert second == first
    if loop_hit not in log2 and "Error reading persistent compilation cache" in log2:
        # jax-ml/jax#38445: some CPUs' entries are refused on reload (JAX then compiles)
        pytest.skip("this JAX refuses its own CPU cache entries on this machine")
    assert loop_hit in log2


def test_compile_cache_off_and_a_cache_jax_was_given(monkeypatch, tmp_path):
    """A cache JAX was given is used as it is; ``off`` sets none; ``DIR`` sets that one
    (bounded in size). Checked on the configuration only: nothing compiles here."""
    import jax

    from specjax.cli import COMPILE_CACHE_MAX_BYTES, use_compile_cache

    given = jax.config.jax_compilation_cache_dir  # the suite's (tests/conftest.py)
    size = jax.config.jax_compilation_cache_max_size
    monkeypatch.setenv("SPECJAX_COMPILE_CACHE", "off")
    assert given and use_compile_cache() == given
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        jax.config.update("jax_compilation_cache_max_size", -1)
        assert use_compile_cache() is None and jax.config.jax_compilation_cache_dir is None
        assert not (tmp_path / "off").exists() and not os.path.exists("off")
        mine = tmp_path / "mine"
        monkeypatch.setenv("SPECJAX_COMPILE_CACHE", str(mine))
        assert use_compile_cache() == str(mine) and mine.is_dir()
        assert jax.config.jax_compilation_cache_dir == str(mine)
        assert jax.config.jax_compilation_cache_max_size == COMPILE_CACHE_MAX_BYTES
    finally:
        jax.config.update("jax_compilation_cache_dir", given)
        jax.config.update("jax_compilation_cache_max_size", size)


def test_every_package_is_listed_in_pyproject():
    """Packages are listed explicitly (pallas_kernels/ and train/ map under specjax.*)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for top, ns in (("specjax", "specjax"), ("pallas_kernels", "specjax.pallas_kernels"),
                    ("train", "specjax.train")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([ns, *rel.parts]))
    assert found == listed


def test_method_builder_defaults_and_errors():
    from specjax.config import tiny_config
    from specjax.drafters.base import DrafterError
    from specjax.methods import build, parse_method_args
    from specjax.models.loaders import random_model

    m = random_model(tiny_config(num_layers=4))
    d, p, _ = build("prompt_lookup", m, parse_method_args(["k=5", "min_ngram=1"]))
    assert (d.max_k, d.min_ngram, p.name, p.max_k) == (5, 1, "adaptive", 5)
    d, p, _ = build("early_exit", m, {"exit_layer": "2", "policy": "fixed"})
    assert (d.exit_layer, p.name) == (2, "fixed")
    assert build("ar", m, {}) == (None, None, None)
    with pytest.raises(DrafterError, match="does not take 'banana'.*accepts: .*exit_layer"):
        build("early_exit", m, {"banana": "1"})
    with pytest.raises(DrafterError, match="k must be an integer"):
        build("prompt_lookup", m, {"k": "many"})
    with pytest.raises(DrafterError, match="key=value"):
        parse_method_args(["k5"])
    with pytest.raises(DrafterError, match="unknown policy 'psychic'"):
        build("layer_skip", m, {"policy": "psychic"})
    d, *_ = build("layer_skip", m, parse_method_args(["skip_attn=2"]))  # one layer, an int
    assert (d.skip_attn, d.skip_mlp) == ((2,), ())
    with pytest.raises(DrafterError, match="skip_mlp takes layer indices and ranges"):
        build("layer_skip", m, {"skip_mlp": "a-b"})
    for L in (2, 3):  # defaults work on tiny models too
        d, *_ = build("layer_skip", random_model(tiny_config(num_layers=L)), {})
        assert d.skip_attn == d.skip_mlp == (1,)


def test_eagle_drafts_a_three_node_tree_by_default_when_greedy_at_batch_1():
    from specjax.config import tiny_config
    from specjax.methods import build, build_drafter
    from specjax.models.loaders import random_model

    m = random_model(tiny_config(num_layers=2))
    d, p, _ = build("eagle", m, {})
    assert (d.tree.kind, d.tree.width, d.tree.depth, d.tree.num_nodes) == ("dynamic", 2, 3, 3)
    assert (d.max_k, p.name) == (3, "fixed")
    # what the measurements did not cover keeps the chain of k = 3: sampling, a batch, and a
    # run that asks for a length or a policy
    for args, kw in (({}, {"greedy": False}), ({}, {"batch": 4}),
                     ({"policy": "fixed"}, {}), ({"k": "3"}, {}), ({"verifier": "exact"}, {})):
        d = build_drafter("eagle", m, args, **kw)
        assert (d.tree, d.max_k) == (None, 3), (args, kw)
    assert build_drafter("eagle", m, {"k": "2"}).max_k == 2
    d = build_drafter("eagle", m, {"tree": "dynamic:width=3,nodes=7"})  # depth k = 4
    assert (d.tree.width, d.tree.num_nodes, d.tree.depth) == (3, 7, 4)
    # the spellings of a tree before it became one option keep what they gave before the
    # default: alone, the chain (they only modify a tree given); with tree=, their tree
    assert build_drafter("eagle", m, {"tree_width": "3", "tree_nodes": "5"}).tree is None
    d = build_drafter("eagle", m, {"tree": "dynamic", "tree_width": "3", "tree_nodes": "5"})
    assert (d.tree.width, d.tree.num_nodes) == (3, 5)


def test_adaptive_cost_from_verify_curve_json(tmp_path):
    from specjax.config import tiny_config
    from specjax.drafters.base import DrafterError
    from specjax.methods import build
    from specjax.models.loaders import random_model
    from specjax.policies.adaptive import load_cost_curve

    f = tmp_path / "curve.json"
    f.write_text(json.dumps({"ks": [1, 2, 4], "seconds": {},
                             "relative": {"1": [1.0, 1.5, 2.5], "4": [1.0, 1.2, 1.6]}}))
    assert load_cost_curve(str(f)) == (1.0, 1.5, 2.0, 2.5)  # T = 3 interpolated
    assert load_cost_curve(str(f), 4) == (1.0, 1.2, 1.4, 1.6)
    m = random_model(tiny_config(num_layers=2))
    _, p, _ = build("prompt_lookup", m, {"cost": f"{f}#4"})
    assert p.cost == (1.0, 1.2, 1.4, 1.6)
    _, p, _ = build("prompt_lookup", m, {"cost": "1,1.1,1.3"})
    assert p.cost == (1.0, 1.1, 1.3)
    with pytest.raises(DrafterError, match="no curve for batch 2; it has batches \\[1, 4\\]"):
        build("prompt_lookup", m, {"cost": f"{f}#2"})
    with pytest.raises(DrafterError, match="nope.json: verify-curve file not found"):
        build("prompt_lookup", m, {"cost": str(tmp_path / "nope.json")})
    f.write_text('{"ks": [2, 4], "relative": {"1": [1.0, 2.0]}}')
    with pytest.raises(DrafterError, match="increasing ks from 1"):
        load_cost_curve(str(f))
    f.write_text("[1, 2]")
    with pytest.raises(DrafterError, match="not a verify-curve JSON"):
        load_cost_curve(str(f))
    f.write_text('{"ks": [1], "relative": {}}')
    with pytest.raises(DrafterError, match="holds no batch sizes"):
        load_cost_curve(str(f))


@pytest.mark.real_model
@pytest.mark.long  # 73 s, mostly exact-numerics probes at -O0 (suite time); the API-level
# real-model identity checks (tests/test_real_model.py) stay in the default run
def test_cli_speculative_method_matches_ar(tmp_path):
    pf = tmp_path / "p.jsonl"
    pf.write_text('{"id": 1, "prompt": "Repeat exactly: the cat sat on the mat, the cat sat on '
                  'the mat."}\n')
    outs = {}
    # the default numerics (exact) end to end; model-based drafters are checked on the real
    # model through the API (tests/test_real_model.py)
    for method, extra in (("ar", []), ("prompt_lookup", ["--method-arg", "k=4"])):
        out = tmp_path / f"{method}.jsonl"
        assert main(["generate", "--prompts", str(pf), "--max-new-tokens", "24", "--quiet",
                     "--method", method, "--output", str(out), *extra]) == 0
        outs[method] = json.loads(out.read_text())
    for method in ("prompt_lookup",):
        r = outs[method]
        assert r["output_ids"] == outs["ar"]["output_ids"]
        assert r["accepted_per_forward"] == r["new_tokens"] / r["target_forwards"]
        assert len(r["accepted_by_position"]) == r["method_config"]["k"]
        assert r["new_tokens"] in (r["target_forwards"] + r["accepted"],
                                   r["target_forwards"] + r["accepted"] - 1)
    assert outs["prompt_lookup"]["accepted"] > 0


def test_method_spec_of_the_scripts():
    """``name:key=value,...`` (scripts/ab_methods.py, profile_decode_loop.py): ``;`` inside a
    value is a comma; an argument without ``=`` is an error naming the spec."""
    from specjax.drafters.base import DrafterError
    from specjax.methods import parse_method_spec, split_method_specs

    assert parse_method_spec("prompt_lookup") == ("prompt_lookup", {})
    assert parse_method_spec("ngram:learn=false,sources=suffix;sssd,k=8") == (
        "ngram", {"learn": "false", "sources": "suffix,sssd", "k": "8"})
    assert parse_method_spec("ngram:cost=1;100") == ("ngram", {"cost": "1,100"})
    with pytest.raises(DrafterError, match="'ngram:learn'.*key=value"):
        parse_method_spec("ngram:learn")
    # --methods arguments: a spec with options is one argument, names may be comma-separated
    assert split_method_specs(["ar,prompt_lookup", "ngram:sources=suffix;sssd,k=8",
                               " suffix "]) == ["ar", "prompt_lookup",
                                                "ngram:sources=suffix;sssd,k=8", "suffix"]
