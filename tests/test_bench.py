"""`specjax bench` end to end on a tiny random model written as a GGUF file."""

import json
import re
from pathlib import Path

import pytest

from gguf_fixtures import VOCAB_SIZE
from specjax.bench import BenchError, load_prompts, parse_bench_method_args
from specjax.cli import main
from specjax.errors import ConfigError
from specjax.config import RopeScaling, tiny_config
from specjax.models.loaders import random_model
from specjax.models.weights import model_to_tensors


@pytest.fixture
def prompts_file(tmp_path):
    f = tmp_path / "q.jsonl"
    rows = [
        {"question_id": 1, "category": "qa", "turns": ["hello world hello world hello"]},
        {"question_id": 2, "category": "qa", "turns": ["abc abc abc abc"]},
        {"question_id": 3, "category": "code", "turns": ["def f(x): return x; def f(x):"]},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def run_bench(tmp_path, model, prompts, extra=()):
    """The bench on the tiny model in fast numerics: the invariant ("exact") forward compiles
    ~10x slower under the suite's -O0 backend and is checked bit for bit on its own
    (tests/test_numerics.py); greedy decoding of this float32 model agrees either way."""
    out = tmp_path / "res.json"
    png = tmp_path / "res.png"
    rc = main(["bench", "--model", str(model), "--numerics", "fast",
               "--methods", "ar,prompt_lookup,early_exit",
               "--method-arg", "prompt_lookup.k=4", "--method-arg", "early_exit.exit_layer=1",
               "--prompts", str(prompts), "--max-new-tokens", "12", "--repeats", "2",
               "--output", str(out), "--plot", str(png), *extra])
    assert rc == 0
    return json.loads(out.read_text()), png


@pytest.mark.long  # 58 s (suite time); the bench's pieces keep their own default-run tests
def test_bench_end_to_end(tmp_path, tiny_gguf, prompts_file, capsys):
    res, png = run_bench(tmp_path, tiny_gguf, prompts_file)
    assert png.exists() and png.stat().st_size > 1000
    for key in ("date", "machine", "command", "rows", "categories", "max_new_tokens"):
        assert key in res
    assert set(res["categories"]) == {"qa", "code"}
    rows = {(r["method"], r["category"]): r for r in res["rows"]}
    assert set(rows) == {(m, c) for m in ("ar", "prompt_lookup", "early_exit")
                         for c in ("qa", "code", "ALL")}
    for (m, c), r in rows.items():
        for key in ("tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", "speedup_vs_ar",
                    "tau", "compile_s", "identical_to_ar", "prompts", "new_tokens"):
            assert key in r, (m, c, key)
        assert r["identical_to_ar"] is True
        assert r["tokens_per_s_min"] <= r["tokens_per_s"] <= r["tokens_per_s_max"]
        # the speedup is this run's ratio of medians
        ar = rows[("ar", c)]
        assert r["speedup_vs_ar"] == pytest.approx(r["tokens_per_s"] / ar["tokens_per_s"])
        if m != "ar":
            assert len(r["acceptance_by_position"]) == r["config"]["k"]
    assert rows[("ar", "ALL")]["tau"] == 1.0
    assert rows[("ar", "ALL")]["decode_speedup_vs_ar"] == pytest.approx(1.0)
    assert all(r["decode_speedup_vs_ar"] > 0 for r in rows.values())
    assert "speedup" in capsys.readouterr().out


def test_decode_speedup_leaves_out_the_prefill():
    """Hand-made runs: the decode speedup counts the tokens after each row's first over the
    time after the prefill; it is None when a run has no prefill time (peers, old journals)."""
    from specjax.bench import Run, summarize

    def run(m, rep, wall, prefill, tokens=11, rows=1):
        return Run(m, "c", rep, [f"p{i}" for i in range(rows)], tokens * rows, wall, 0,
                   None, None, [[1] * tokens] * rows, rows, prefill)

    runs = [run("ar", 0, 3.0, 1.0), run("ar", 1, 3.0, 1.0),
            run("pl", 0, 1.5, 1.0), run("pl", 1, 2.0, 1.0),
            run("pl", 2, 1.5, 1.0),
            run("hf", 0, 2.0, None)]
    rows = {(r["method"], r["category"]): r
            for r in summarize(runs, ["ar", "pl", "hf"], ["c"], {}, {}, True)["rows"]}
    # ar: 10 decode tokens in 2 s; pl: 10 in 0.5, 1.0, 0.5 s (median 20 tok/s) -> 4x
    assert rows[("pl", "c")]["decode_speedup_vs_ar"] == pytest.approx(4.0)
    # end to end: 11 tokens in 3 s against 11 in 1.5 s (median) -> 2x
    assert rows[("pl", "c")]["speedup_vs_ar"] == pytest.approx(2.0)
    assert rows[("hf", "c")]["decode_speedup_vs_ar"] is None
    two = summarize([run("ar", 0, 3.0, 1.0, rows=2), run("pl", 0, 2.0, 1.0, rows=2)],
                    ["ar", "pl"], ["c"], {}, {}, True)["rows"]
    assert two[1]["decode_speedup_vs_ar"] == pytest.approx(2.0)  # 20 tokens: 2 s vs 1 s


def test_bench_w8a8_target(tmp_path, tiny_gguf, prompts_file, capsys):
    """--quantize w8a8 with --numerics fast: the run works, says it is not token-identical
    (exact numerics, the default, are: tests/test_numerics.py), records the settings (the
    journal too), and the adaptive policy gets the w8a8 cost curve."""
    from specjax.methods import build
    from specjax.models.loaders import load
    from specjax.policies.adaptive import DEFAULT_COST, DEFAULT_COST_W8A8

    out, journal = tmp_path / "q.json", tmp_path / "q.journal.jsonl"
    assert main(["bench", "--model", str(tiny_gguf), "--quantize", "w8a8", "--methods",
                 "ar,prompt_lookup", "--prompts", str(prompts_file), "--max-new-tokens", "6",
                 "--repeats", "1", "--output", str(out), "--journal", str(journal),
                 "--numerics", "fast"]) == 0
    assert "not token-identical" in capsys.readouterr().err
    res = json.loads(out.read_text())
    assert "--quantize w8a8" in res["command"] and "--numerics fast" in res["command"]
    assert res["numerics"] == "fast" and {r["numerics"] for r in res["rows"]} == {"fast"}
    assert json.loads(journal.read_text().splitlines()[0])["header"]["quantize"] == "w8a8"
    assert json.loads(out.read_text())["quantize"] == "w8a8"
    # the journal will not mix float runs into a w8a8 table
    assert main(["bench", "--model", str(tiny_gguf), "--methods", "ar,prompt_lookup",
                 "--prompts", str(prompts_file), "--max-new-tokens", "6", "--repeats", "1",
                 "--journal", str(journal)]) == 2
    assert "quantize" in capsys.readouterr().err
    assert main(["bench", "--model", str(tiny_gguf), "--quantize", "w8a8", "--peer", "hf",
                 "--prompts", str(prompts_file)]) == 2
    assert "cannot stand beside" in capsys.readouterr().err
    q = load(tiny_gguf, quantize="w8a8")
    assert build("prompt_lookup", q)[1].cost == DEFAULT_COST_W8A8
    assert build("prompt_lookup", load(tiny_gguf))[1].cost == DEFAULT_COST
    assert build("prompt_lookup", q, {"cost": "1,1.5"})[1].cost == (1.0, 1.5)


@pytest.mark.long  # 57 s (suite time): the flag's logic is summarize()'s, whose planted-error
# check stays in the default run through test_bench_batch_sizes (its batch-2 rows)
def test_identical_flag_catches_a_wrong_method(tmp_path, tiny_gguf, prompts_file, monkeypatch):
    """Plant a method whose output is wrong: the flag must say so."""
    import specjax.engine

    real = specjax.engine.generate

    def corrupt(model, prompts, **kw):
        res = real(model, prompts, **kw)
        d = kw.get("drafter")
        if d is not None and d.name == "early_exit":
            res.tokens[0] = res.tokens[0][:-1] + [(res.tokens[0][-1] + 1) % VOCAB_SIZE]
        return res

    monkeypatch.setattr(specjax.engine, "generate", corrupt)
    # one repeat of one category (suite time; the flag is computed the same way for any size)
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file, extra=["--repeats", "1",
                                                                  "--categories", "code"])
    flags = {(r["method"], r["category"]): r["identical_to_ar"] for r in res["rows"]}
    assert flags[("early_exit", "ALL")] is False
    assert flags[("prompt_lookup", "ALL")] is True


def test_bench_inputs(tmp_path, prompts_file):
    items = load_prompts(str(prompts_file), ["code"])
    assert [i["id"] for i in items] == [3]
    assert len(load_prompts("builtin", limit=1)) == len({c for c, _ in
                                                         __import__("specjax.bench").bench.BUILTIN})
    assert [i["id"] for i in load_prompts(str(prompts_file), [" code ", ""])] == [3]
    with pytest.raises(BenchError, match="unknown categories \\['poetry'\\]"):
        load_prompts(str(prompts_file), ["poetry"])
    with pytest.raises(BenchError, match="METHOD.key=value"):
        parse_bench_method_args(["k=3"], ["ar", "prompt_lookup"])
    with pytest.raises(BenchError, match="not in --methods"):
        parse_bench_method_args(["medusa.k=3"], ["ar", "prompt_lookup"])
    assert main(["bench", "--methods", "ar,telepathy", "--prompts", str(prompts_file)]) == 2


def test_bench_refuses_sweeps_of_drafters_that_learn(tmp_path, tiny_gguf, prompts_file,
                                                     capsys, monkeypatch):
    """A drafter that keeps what it saw across calls (suffix cache, datastore, STAND tables
    kept) would draft a prompt decoded again from its own earlier answer: the bench refuses
    a batch-size sweep with it and says what to change (its repeats run from snapshots:
    the next test); learn=false / memory=call say it does not learn."""
    from specjax import methods
    from specjax.drafters.base import learns_across_calls
    from specjax.models.loaders import load

    lm = load(str(tiny_gguf))
    for name, args, want in [("suffix", {}, True), ("suffix", {"learn": "false"}, False),
                             ("sssd", {"datastore": "empty"}, True),
                             ("ngram", {}, True), ("ngram", {"learn": "false"}, False),
                             ("ngram", {"learn": "false", "sources": "suffix,sssd",
                                        "datastore": "empty"}, False),
                             ("ngram", {"sources": "prompt_lookup"}, False),
                             ("stand", {"memory": "keep"}, True), ("stand", {}, False),
                             ("token_recycling", {"memory": "keep"}, True),
                             ("token_recycling", {"memory": "call"}, False),
                             ("token_recycling", {}, False),
                             ("prompt_lookup", {}, False)]:
        assert learns_across_calls(methods.build(name, lm, args).drafter) is want, (name, args)
        assert learns_across_calls(methods.build_drafter(name, lm, args)) is want, (name, args)

    def no_build(*a, **k):  # the refusal comes before any method is built (costs measured)
        raise AssertionError("a method was built before the --batch-sizes check")

    import specjax.bench.runner as runner

    monkeypatch.setattr(runner, "build", no_build)
    rc = main(["bench", "--model", str(tiny_gguf), "--numerics", "fast",
               "--methods", "ar,prompt_lookup,ngram", "--prompts", str(prompts_file),
               "--max-new-tokens", "4", "--output", str(tmp_path / "r.json"), "--repeats", "2",
               "--batch-sizes", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "ngram learn from every answer across calls" in err, err
    assert "with --batch-sizes a prompt" in err
    assert "learn=false" in err and not (tmp_path / "r.json").exists()


def suffix_cache_sizes(monkeypatch) -> list[int]:
    """A list that gets, for every ``generate`` call with the suffix drafter, how many answers
    its global cache held when the call started."""
    import specjax.engine

    seen = []
    real = specjax.engine.generate

    def spying(model, prompts, **kw):
        d = kw.get("drafter")
        if d is not None and d.name == "suffix":
            seen.append(len(d.cache))
        return real(model, prompts, **kw)

    monkeypatch.setattr(specjax.engine, "generate", spying)
    return seen


def test_repeats_of_a_drafter_that_learns_start_from_what_the_batch_found(
        tmp_path, tiny_gguf, prompts_file, monkeypatch, capsys):
    """With --repeats 2, every repeat of a batch drafts from the suffix cache as it was before
    the batch (the repeats run back to back from a snapshot), never from its own earlier
    answer; the next batch's runs start with each finished answer learnt once, in a resumed
    journal too (whose progress bar counts both repeats of a finished batch as done); both
    repeats are recorded and identical to plain decoding."""
    seen = suffix_cache_sizes(monkeypatch)
    journal, out = tmp_path / "j.jsonl", tmp_path / "r.json"
    cmd = ["bench", "--model", str(tiny_gguf), "--numerics", "fast", "--methods", "ar,suffix",
           "--prompts", str(prompts_file), "--max-new-tokens", "6", "--repeats", "2",
           "--journal", str(journal), "--output", str(out)]
    assert main(cmd + ["--time-limit", "1e-9"]) == 0  # the first batch, both repeats
    assert len(seen) >= 2 and set(seen) == {0}, seen
    seen.clear()
    capsys.readouterr()
    assert main(cmd) == 0
    assert len(seen) >= 4 and seen == sorted(seen) and set(seen) == {1, 2}, seen
    assert "12/12 " in capsys.readouterr().err  # 2 methods x 2 repeats x 3 prompts
    recs = [json.loads(x) for x in journal.read_text().splitlines()[1:]]
    assert len(recs) == 3  # three prompts, one group each, holding both repeats
    for rec in recs:
        assert sorted((r["method"], r["repeat"]) for r in rec["runs"]) == [
            ("ar", 0), ("ar", 1), ("suffix", 0), ("suffix", 1)]
    res = json.loads(out.read_text())
    assert all(r["identical_to_ar"] for r in res["rows"]) and res["progress"]["complete"]


@pytest.mark.long  # suite time (20 s); the peer model's parity with ours stays by default
def test_bench_hf_peer(tmp_path, tiny_gguf, prompts_file):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file, extra=["--peer", "hf",
                                                                  "--categories", "code"])
    rows = {(r["method"], r["category"]): r for r in res["rows"]}
    # the same weights in PyTorch give the same greedy tokens; the peer has no tau
    assert rows[("hf_ar", "code")]["identical_to_ar"] is True
    assert rows[("hf_prompt_lookup", "code")]["identical_to_ar"] is True
    assert rows[("hf_ar", "code")]["tau"] is None


@pytest.mark.parametrize("extra", [
    dict(rope_scaling=RopeScaling("linear", 4.0)),
    dict(rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 16)),
], ids=["linear_rope", "llama3_rope"])
def test_hf_peer_model_matches_ours(extra):
    """The peer rebuilds the model in transformers: rope scaling must carry over, or the
    peer times (and compares tokens of) a different model."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import dataclasses
    import types

    import jax.numpy as jnp
    import numpy as np

    from specjax.bench import dense_hf_model
    from specjax.models.weights import model_from_tensors

    cfg = tiny_config(num_layers=2, max_position_embeddings=256, **extra)
    model = random_model(cfg, seed=5)
    hf = dense_hf_model(types.SimpleNamespace(config=cfg, model=model))
    T = 96  # past the llama3 rule's original context, so the scaling matters
    toks = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, T))
    with torch.no_grad():
        ref = hf(torch.tensor(toks)).logits.numpy()
    cache = model.init_cache(1, T)
    pos = jnp.arange(T, dtype=jnp.int32)[None]
    got = np.asarray(model(jnp.asarray(toks, jnp.int32), pos, cache).logits)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    # the scaling matters at these positions, so a peer without it would have failed above
    plain = model_from_tensors(dataclasses.replace(cfg, rope_scaling=None),
                               model_to_tensors(model), source="no scaling")
    assert np.abs(np.asarray(plain(jnp.asarray(toks, jnp.int32), pos, cache).logits)
                  - got).max() > 1e-3


def test_verify_curve_command(tmp_path, tiny_gguf):
    out = tmp_path / "curve.json"
    assert main(["bench", "--verify-curve", "--model", str(tiny_gguf), "--numerics", "fast",
                 "--curve-ks", "1,2,4",
                 "--curve-batches", "1,2", "--curve-prefix", "8", "--output", str(out),
                 "--plot", str(tmp_path / "c.png")]) == 0
    curve = json.loads(out.read_text())
    assert curve["ks"] == [1, 2, 4] and set(curve["relative"]) == {"1", "2"}
    for B in ("1", "2"):
        assert curve["relative"][B][0] == 1.0
        assert all(s > 0 for s in curve["seconds"][B])
    assert (tmp_path / "c.png").exists()
    for flag, value in (("--curve-ks", "2,4"), ("--curve-ks", "1,x"), ("--curve-ks", "1,4,2"),
                        ("--curve-batches", "0,1")):  # clear errors, not tracebacks
        assert main(["bench", "--verify-curve", "--model", str(tiny_gguf), flag, value]) == 2


def test_verify_curve_on_a_given_cache_size(tiny_gguf):
    """``cache_len`` sets the static cache the block is timed on (attention reads all of it);
    one that cannot hold the prefix and the largest block is refused, naming both."""
    from specjax.bench.curve import verify_curve
    from specjax.models.loaders import load

    lm = load(str(tiny_gguf), numerics="fast")
    c = verify_curve(lm, ks=(1, 2), batches=(1,), prefix=8, repeats=1, cache_len=64)
    assert c["cache_len"] == 64 and c["relative"]["1"][0] == 1.0
    assert verify_curve(lm, ks=(1, 2), batches=(1,), prefix=8, repeats=1)["cache_len"] == 10
    with pytest.raises(BenchError, match="cache_len 9 cannot hold the 8-token prefix and a "
                                         "2-token block"):
        verify_curve(lm, ks=(1, 2), batches=(1,), prefix=8, repeats=1, cache_len=9)


@pytest.mark.long  # 23 s (suite time); the plain verify curve stays in the default run
def test_verify_curve_in_loop(tmp_path, tiny_gguf, monkeypatch):
    """--in-loop times whole loop steps with k - 1 junk drafts each; the file has the curve
    layout the adaptive policy reads."""
    import specjax.bench.curve as curve_module
    from specjax.bench import _JunkDrafter
    from specjax.engine import generate
    from specjax.models.loaders import load
    from specjax.policies.adaptive import load_cost_curve

    real = curve_module.verify_curve_in_loop  # specjax.bench.run calls it through the module
    monkeypatch.setattr(curve_module, "verify_curve_in_loop",
                        lambda *a, **kw: real(*a, **{**kw, "steps": 4, "repeats": 1}))
    out = tmp_path / "loop.json"
    assert main(["bench", "--verify-curve", "--in-loop", "--model", str(tiny_gguf),
                 "--curve-ks", "1,2,4", "--curve-batches", "1,2", "--curve-prefix", "8",
                 "--numerics", "fast", "--output", str(out)]) == 0
    curve = json.loads(out.read_text())
    assert curve["in_loop"] is True and curve["engine_k"] == 3 and curve["ks"] == [1, 2, 4]
    assert curve["steps"] == 4  # the stand-in above ran
    for B in ("1", "2"):
        assert curve["relative"][B][0] == 1.0 and all(s > 0 for s in curve["seconds"][B])
    assert len(load_cost_curve(str(out))) == 4
    # the probe drafts k - 1 tokens at every step (but the last two, which the engine clips
    # to the token budget), and nothing when asked for 0
    lm = load(str(tiny_gguf), numerics="fast")
    for k in (0, 2):
        r = generate(lm.model, [[5, 6, 7, 8]], max_new_tokens=12, drafter=_JunkDrafter(3, k))
        steps = r.target_forwards[0] - 1
        assert steps >= 3 and k * (steps - 2) <= r.extra["drafted"][0] <= k * steps
    with pytest.raises(BenchError, match="0..max_k"):
        _JunkDrafter(3, 4)
    assert main(["bench", "--in-loop", "--model", str(tiny_gguf)]) == 2  # curve only
    assert main(["bench", "--verify-curve", "--in-loop", "--model", str(tiny_gguf),
                 "--numerics", "fast",
                 "--curve-ks", "1"]) == 2  # nothing drafted


def test_batch_size_sweep_helpers():
    from specjax.bench import parse_batch_sizes, parse_positive_ints, sweep_batches

    assert parse_batch_sizes("4,1,4") == [1, 4] and parse_batch_sizes(None) == []
    for bad in ("0,2", "a,b"):
        with pytest.raises(BenchError, match="--batch-sizes"):
            parse_batch_sizes(bad)
    # strict (curve axes): order and repeats are typos, and an empty list is an error
    assert parse_positive_ints("1, 2,8", "--k", strict=True) == [1, 2, 8]
    for bad in ("1,4,2", "1,1", "", "0,1"):
        with pytest.raises(BenchError, match="--k"):
            parse_positive_ints(bad, "--k", strict=True)
    # every batch is full, cycling through the prompts; B = 1 reuses the per-category runs
    assert sweep_batches(3, [1, 2, 4], batch_size=1) == {2: [[0, 1], [2, 0]], 4: [[0, 1, 2, 0]]}
    assert sweep_batches(3, [1], batch_size=2) == {1: [[0], [1], [2]]}


def test_bench_batch_sizes(tmp_path, tiny_gguf, prompts_file, monkeypatch):
    """--batch-sizes: per-batch-size figures from the same run, flags per batch size, and the
    third plot panel. A method planted to be wrong only in batches of 2 is caught there."""
    import matplotlib.image

    import specjax.engine

    real = specjax.engine.generate

    def corrupt(model, prompts, **kw):
        res = real(model, prompts, **kw)
        d = kw.get("drafter")
        if d is not None and d.name == "prompt_lookup" and len(prompts) == 2:
            res.tokens[1] = res.tokens[1][:-1] + [(res.tokens[1][-1] + 1) % VOCAB_SIZE]
        return res

    monkeypatch.setattr(specjax.engine, "generate", corrupt)
    out, png = tmp_path / "res.json", tmp_path / "res.png"
    assert main(["bench", "--model", str(tiny_gguf), "--numerics", "fast",
                 "--methods", "ar,prompt_lookup",
                 "--method-arg", "prompt_lookup.k=4", "--prompts", str(prompts_file),
                 "--max-new-tokens", "8", "--repeats", "2", "--batch-sizes", "1,2",
                 "--output", str(out), "--plot", str(png)]) == 0
    res = json.loads(out.read_text())
    assert res["batch_sizes"] == [1, 2] and res["batch_size"] == 1
    sweep = res["by_batch_size"]
    assert sweep["batch_sizes"] == [1, 2]
    rows = {(r["method"], r["batch_size"]): r for r in sweep["rows"]}
    assert set(rows) == {(m, b) for m in ("ar", "prompt_lookup") for b in (1, 2)}
    for (m, b), r in rows.items():
        assert r["tokens_per_s_min"] <= r["tokens_per_s"] <= r["tokens_per_s_max"]
        assert r["tokens_per_s"] > 0 and r["prompts"] == 3
        assert r["speedup_vs_ar"] == pytest.approx(r["tokens_per_s"] /
                                                   rows[("ar", b)]["tokens_per_s"])
    assert rows[("ar", 2)]["tau"] == 1.0
    # tokens drafted per row and step: what a draft-length policy chooses, at most k = 4
    assert "mean_drafted" not in rows[("ar", 2)]
    assert all(0 <= rows[("prompt_lookup", b)]["mean_drafted"] <= 4 for b in (1, 2))
    # batch 1 is the per-category run itself (same work): its figures are the ALL row's
    all_rows = {r["method"]: r for r in res["rows"] if r["category"] == "ALL"}
    assert rows[("prompt_lookup", 1)]["tokens_per_s"] == all_rows["prompt_lookup"][
        "tokens_per_s"]
    # batch 2 ran 2 batches of 2 rows (3 prompts, cycled) per repeat
    assert 0 < rows[("ar", 2)]["new_tokens"] <= 4 * 8
    assert rows[("prompt_lookup", 1)]["identical_to_ar"] is True
    assert rows[("prompt_lookup", 2)]["identical_to_ar"] is False
    assert all_rows["prompt_lookup"]["identical_to_ar"] is True
    img = matplotlib.image.imread(png)
    assert img.shape[1] > 2000  # three panels (two panels are 1430 pixels wide)
    assert main(["bench", "--model", str(tiny_gguf), "--batch-sizes", "0",
                 "--prompts", str(prompts_file)]) == 2


def test_bench_sweep_only(tmp_path, tiny_gguf, prompts_file):
    """--sweep-only: the batch-size sweep alone (batch 1 swept too), no per-category rows, a
    two-panel plot (tokens/s and speedup by batch size); refused without --batch-sizes."""
    import matplotlib.image

    from specjax.bench import BenchConfig

    out, png = tmp_path / "res.json", tmp_path / "res.png"
    assert main(["bench", "--model", str(tiny_gguf), "--numerics", "fast",
                 "--methods", "ar,prompt_lookup", "--prompts", str(prompts_file),
                 "--max-new-tokens", "6", "--repeats", "1", "--batch-sizes", "1,2",
                 "--sweep-only", "--output", str(out), "--plot", str(png)]) == 0
    res = json.loads(out.read_text())
    assert res["rows"] == [] and res["sweep_only"] is True
    rows = {(r["method"], r["batch_size"]): r for r in res["by_batch_size"]["rows"]}
    assert set(rows) == {(m, b) for m in ("ar", "prompt_lookup") for b in (1, 2)}
    assert rows[("ar", 1)]["prompts"] == 3 and rows[("ar", 1)]["new_tokens"] <= 3 * 6
    assert rows[("ar", 2)]["new_tokens"] <= 4 * 6  # 2 batches of 2 rows, prompts cycled
    assert all(r["identical_to_ar"] for r in rows.values())
    # 3 single-row groups and 2 two-row groups, nothing else
    assert res["progress"]["groups_total"] == 5 and res["progress"]["complete"]
    img = matplotlib.image.imread(png)
    assert 1000 < img.shape[1] < 2000  # two panels
    with pytest.raises(ConfigError, match="batch_sizes"):
        BenchConfig(sweep_only=True)
    assert main(["bench", "--model", str(tiny_gguf), "--prompts", str(prompts_file),
                 "--batch-sizes", "2", "--sweep-only", "--peer", "hf"]) == 2


def test_bench_reverses_the_method_order_every_other_batch(tmp_path, tiny_gguf, prompts_file,
                                                           monkeypatch):
    """Methods run interleaved, in the listed order on even prompt batches and reversed on odd
    ones (a drift within a batch's runs then favours no method); the journal says which, and
    keeps each batch's runs in the listed order."""
    import specjax.engine

    real, calls = specjax.engine.generate, []

    def spy(model, prompts, **kw):
        d = kw.get("drafter")
        calls.append("ar" if d is None else d.name)
        return real(model, prompts, **kw)

    monkeypatch.setattr(specjax.engine, "generate", spy)
    journal = tmp_path / "j.jsonl"
    assert main(["bench", "--model", str(tiny_gguf), "--numerics", "fast",
                 "--methods", "ar,prompt_lookup", "--prompts", str(prompts_file),
                 "--max-new-tokens", "4", "--repeats", "1", "--batch-sizes", "2",
                 "--sweep-only", "--journal", str(journal),
                 "--output", str(tmp_path / "r.json")]) == 0
    recs = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    assert [r["order"] for r in recs] == ["listed", "reversed"]
    assert all([x["method"] for x in r["runs"]] == ["ar", "prompt_lookup"] for r in recs)
    # consecutive calls of one method merged (a compiling call is timed again): batch 1 ran
    # ar then prompt_lookup, batch 2 prompt_lookup (merged with batch 1's last) then ar; the
    # listed order both times would read ar, prompt_lookup, ar, prompt_lookup
    merged = [c for i, c in enumerate(calls) if i == 0 or c != calls[i - 1]]
    assert merged == ["ar", "prompt_lookup", "ar"]


def test_bench_journal_resumes(tmp_path, tiny_gguf, prompts_file, monkeypatch, capsys):
    """A run stopped by --time-limit keeps its finished batches in the journal; the same
    command continues with the rest only, and the final result covers every prompt. A
    journal from other settings, or a line cut short by a crash, is handled with care."""
    import specjax.engine

    journal = tmp_path / "j.jsonl"
    calls = []
    real = specjax.engine.generate

    def counting(model, prompts, **kw):
        r = real(model, prompts, **kw)
        if not r.compile_s:  # a freshly compiled program's first run is run again (timing):
            calls.append(len(prompts))  # count the runs the bench keeps, in any test order
        return r

    monkeypatch.setattr(specjax.engine, "generate", counting)
    # a limit that has passed by the second batch: exactly one batch runs
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file,
                       extra=["--journal", str(journal), "--time-limit", "1e-9"])
    from specjax.bench import machine_description
    here = machine_description()
    assert res["progress"] == {"groups_done": 1, "groups_total": 6, "complete": False,
                               "stopped_by_time_limit": True, "machines": {here: 1}}
    assert "partial result: 1 of 6" in capsys.readouterr().err
    assert len(calls) == 3  # ar, prompt_lookup, early_exit on one batch
    lines = journal.read_text().splitlines()
    assert len(lines) == 2 and "header" in json.loads(lines[0])
    # round robin over categories: the second batch is the other category
    first = json.loads(lines[1])
    assert first["machine"] == here and first["finished_at"].endswith("+00:00")
    # a group journaled before machines were recorded is counted as such
    del first["machine"], first["finished_at"]
    lines[1] = json.dumps(first)
    journal.write_text("\n".join(lines) + "\n")
    calls.clear()
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file, extra=["--journal", str(journal)])
    assert res["progress"]["complete"] and len(calls) == 3 * 5
    assert res["progress"]["machines"] == {"not recorded": 1, here: 5}
    rows = {(r["method"], r["category"]): r for r in res["rows"]}
    assert rows[("ar", "ALL")]["prompts"] == 3 and rows[("prompt_lookup", "ALL")]["prompts"] == 3
    assert all(r["identical_to_ar"] for r in res["rows"])
    lines = journal.read_text().splitlines()
    assert len(lines) == 7 and json.loads(lines[1]) == first
    # nothing left to do: no generation at all
    calls.clear()
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file, extra=["--journal", str(journal)])
    assert calls == [] and res["progress"]["complete"]
    # --time-limit 0 reports a journal without running anything
    part = tmp_path / "part.jsonl"
    part.write_text("\n".join(lines[:3]) + "\n")
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file,
                       extra=["--journal", str(part), "--time-limit", "0"])
    assert calls == [] and res["progress"]["groups_done"] == 2
    assert {r["category"] for r in res["rows"]} == {"qa", "code", "ALL"}
    # a crash mid-write leaves a partial last line: that group is redone, nothing else
    journal.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file, extra=["--journal", str(journal)])
    assert len(calls) == 3 and res["progress"]["complete"]
    # other settings: a clear error naming what differs
    rc = main(["bench", "--model", str(tiny_gguf), "--numerics", "fast",
               "--methods", "ar,prompt_lookup,early_exit",
               "--method-arg", "prompt_lookup.k=4", "--method-arg", "early_exit.exit_layer=1",
               "--prompts", str(prompts_file), "--max-new-tokens", "9", "--repeats", "2",
               "--journal", str(journal)])
    assert rc == 2
    assert "max_new_tokens: journal 12, now 9" in capsys.readouterr().err


def test_resumed_journal_relearns_what_the_finished_runs_taught(tmp_path, tiny_gguf,
                                                               prompts_file, monkeypatch):
    """A drafter that learns every answer (the suffix cache) starts a resumed journal with
    the finished runs' answers, in order, as the uninterrupted run would have it."""
    seen = suffix_cache_sizes(monkeypatch)
    journal = tmp_path / "j.jsonl"
    cmd = ["bench", "--model", str(tiny_gguf), "--numerics", "fast", "--methods", "ar,suffix",
           "--prompts", str(prompts_file), "--max-new-tokens", "6", "--repeats", "1",
           "--journal", str(journal), "--output", str(tmp_path / "r.json")]
    assert main(cmd + ["--time-limit", "1e-9"]) == 0  # one batch: one prompt learnt
    assert seen and seen[0] == 0
    seen.clear()
    assert main(cmd) == 0
    assert seen[0] == 1, seen  # the resumed run's first batch drafts with the first answer


def test_journal_accepts_a_pinned_default_not_another_config(tmp_path):
    """A journal continues when only the arguments differ and the resolved configs (what the
    runs used, defaults filled in) are the same; it refuses other resolved configs, and
    other arguments where no resolved configs were recorded."""
    from specjax.bench.journal import Journal
    from specjax.errors import BenchError

    cfg = {"eagle": {"method": "eagle", "k": 3, "policy": "fixed"}}
    head = {"model": "m", "method_args": {"eagle": {"k": "3"}}, "configs": cfg}
    path = tmp_path / "j.jsonl"
    assert Journal(path, head).load() == []
    Journal(path, head).append({"group": "g1"})
    pinned = {**head, "method_args": {"eagle": {"k": "3", "policy": "fixed"}}}
    assert Journal(path, pinned).load() == [{"group": "g1"}]
    other = {**pinned, "configs": {"eagle": {**cfg["eagle"], "policy": "adaptive"}}}
    with pytest.raises(BenchError, match="configs: journal"):
        Journal(path, other).load()
    bare = tmp_path / "bare.jsonl"  # a journal from before configs were recorded
    Journal(bare, {"model": "m", "method_args": {"eagle": {"k": "3"}}}).load()
    with pytest.raises(BenchError, match="method_args: journal"):
        Journal(bare, {"model": "m", "method_args": {"eagle": {"k": "4"}}}).load()


def test_journal_refuses_a_changed_policy_default(tmp_path):
    """The resolved configs record the policy's options that differ from its defaults, so a
    journal refuses a rerun whose same arguments now resolve to another option (a default
    changed between sessions); a journal from before the options were recorded compares
    without them, as it did then."""
    from specjax import methods
    from specjax.bench.journal import Journal
    from specjax.errors import BenchError
    from specjax.policies.adaptive import AdaptivePolicy

    from specjax.verifiers.typical import TypicalVerifier

    assert methods.changed_options(AdaptivePolicy(max_k=3)) == {}
    # costs measured on the machine are left out: a journal continues on another machine
    opts = methods.changed_options(AdaptivePolicy(max_k=3, min_gain=1.1, cost=(1.0, 1.5),
                                                  step_cost=(1.0, 1.2, 1.3, 1.4),
                                                  draft_cost=0.1))
    assert opts == {"min_gain": 1.1}
    assert methods.changed_options(TypicalVerifier(threshold=0.2)) == {"threshold": 0.2}
    assert methods.changed_options(None) == {}

    def header(options):
        cfg = {"method": "medusa", "k": 3, "policy": "adaptive", "policy_options": options,
               "verifier_options": {}}
        return {"model": "m", "method_args": {"medusa": {}},
                "configs": {"ar": {"method": "ar"}, "medusa": cfg}}

    path = tmp_path / "j.jsonl"
    Journal(path, header({})).load()
    Journal(path, header({})).append({"group": "g1"})
    assert Journal(path, header({})).load() == [{"group": "g1"}]
    with pytest.raises(BenchError, match="min_gain"):
        Journal(path, header({"min_gain": 1.1})).load()
    old = tmp_path / "old.jsonl"  # written before the options were recorded
    legacy = header({})
    legacy["configs"]["medusa"] = {k: v for k, v in legacy["configs"]["medusa"].items()
                                   if not k.endswith("_options")}
    Journal(old, legacy).load()
    assert Journal(old, header({"min_gain": 1.1})).load() == []
    with pytest.raises(BenchError, match="configs: journal"):
        Journal(old, {**header({}), "configs": {"medusa": {"method": "medusa", "k": 4}}}).load()


def test_journal_compares_every_resolved_option(tmp_path):
    """Journals record every policy and verifier option as resolved (``*_settings``), so a
    changed class default is refused too (the changed options stay ``{}`` on both sides), a
    default pinned after it changed is not (same settings, other changed options), an
    option added to the class since is ignored at its default and refused when set, the
    shipped heads' path of another checkout compares as the same, and a journal that
    recorded only the changed options compares those, as it did."""
    from specjax import methods
    from specjax.bench.journal import Journal
    from specjax.errors import BenchError
    from specjax.policies.adaptive import AdaptivePolicy

    settings = methods.option_settings(AdaptivePolicy(max_k=3, cost=(1.0, 1.5)))
    assert settings["min_gain"] == 1.0 and settings["decay"] == 0.9
    assert "max_k" not in settings and "cost" not in settings  # beside the name; measured
    desc = methods.describe(type("D", (), {"name": "x", "max_k": 3})(),
                            AdaptivePolicy(max_k=3, min_gain=1.1))
    assert desc["policy_options"] == {"min_gain": 1.1}
    assert desc["policy_settings"] == {**settings, "min_gain": 1.1}

    def header(options, min_gain=None):
        cfg = {"method": "medusa", "k": 3, "policy": "adaptive", "policy_options": options,
               "verifier_options": {}}
        if min_gain is not None:
            cfg.update(policy_settings={**settings, "min_gain": min_gain},
                       verifier_settings={})
        return {"model": "m", "method_args": {"medusa": {}},
                "configs": {"ar": {"method": "ar"}, "medusa": cfg}}

    path = tmp_path / "j.jsonl"
    Journal(path, header({}, 1.0)).load()
    Journal(path, header({}, 1.0)).append({"group": "g1"})
    assert Journal(path, header({}, 1.0)).load() == [{"group": "g1"}]
    with pytest.raises(BenchError, match="policy_settings.*'min_gain': 1.1"):
        Journal(path, header({}, 1.1)).load()  # the class default moved to 1.1
    # the class default moved to 1.1 and the run pins 1.0: the same settings
    assert Journal(path, header({"min_gain": 1.0}, 1.0)).load() == [{"group": "g1"}]
    # an option added to the class since: at its default it is the old behaviour; set, not
    added = header({}, 1.0)
    added["configs"]["medusa"]["policy_settings"]["new_knob"] = 2
    assert Journal(path, added).load() == [{"group": "g1"}]
    added["configs"]["medusa"]["policy_options"] = {"new_knob": 2}
    with pytest.raises(BenchError, match="new_knob"):
        Journal(path, added).load()
    # the shipped heads' path of another checkout (a fresh clone, a worktree) is the same

    def described(text):
        h = header({}, 1.0)
        h["configs"]["medusa"]["description"] = text
        return h

    wt = tmp_path / "desc.jsonl"
    Journal(wt, described("heads /tmp/wt/specjax/heads/shipped/m (step 3)")).load()
    assert Journal(wt, described("heads /x/y/specjax/heads/shipped/m (step 3)")).load() == []
    with pytest.raises(BenchError, match="description"):
        Journal(wt, described("heads /x/y/specjax/heads/shipped/other (step 3)")).load()
    with pytest.raises(BenchError, match="description"):
        Journal(wt, described("heads /tmp/wt/runs/m (step 3)")).load()
    changed_only = tmp_path / "changed.jsonl"  # written in the forty-eighth session
    Journal(changed_only, header({})).load()
    assert Journal(changed_only, header({}, 1.1)).load() == []
    with pytest.raises(BenchError, match="min_gain"):
        Journal(changed_only, header({"min_gain": 1.1}, 1.1)).load()


def test_warm_snapshots_learn_the_answers_recorded_before_each_question(tmp_path):
    """Each question starts from the answers of the groups journaled before it (in journal
    order; a question the journal lacks from all of them); the drafter is left as it was; a
    journal question missing from the prompts is an error that names it."""
    from specjax.bench.journal import Journal, warm_snapshots
    from specjax.errors import BenchError

    class Learner:  # what warm_snapshots uses of a drafter that learns across calls
        def __init__(self):
            self.seen = ["before"]

        def observe(self, prompts, outputs):
            self.seen += [f"{p}->{o}" for p, o in zip(prompts, outputs)]

        def snapshot(self):
            return list(self.seen)

        def restore(self, snap):
            self.seen = list(snap)

    path = tmp_path / "j.jsonl"
    Journal(path, {"model": "m"}).load()
    for ids, answers in ((["2", "1"], [[5], [6]]), (["3"], [[7]])):
        Journal(path, {"model": "m"}).append({"runs": [
            {"method": "x", "prompt_ids": ids, "tokens": answers},
            {"method": "ar", "prompt_ids": ids, "tokens": answers}]})
    questions = {i: {"prompt": f"q{i}"} for i in ("1", "2", "3", "9")}
    d = Learner()
    snaps = warm_snapshots(d, path, questions, lambda p: p.upper(), ["2", "1", "3", "9"])
    assert snaps["2"] == ["before"]
    assert snaps["1"] == ["before", "Q2->[5]"]
    assert snaps["3"] == ["before", "Q2->[5]", "Q1->[6]"]
    assert snaps["9"] == ["before", "Q2->[5]", "Q1->[6]", "Q3->[7]"]
    assert d.seen == ["before"]
    with pytest.raises(BenchError, match="journal question 3 is not among the prompts"):
        warm_snapshots(d, path, {i: questions[i] for i in ("1", "2")}, str, ["1"])


# ----------------------------------------------------------------------------- configs/

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.py"))
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
COMPARED = ("model", "dtype", "methods", "prompts", "categories", "limit", "max_new_tokens",
            "batch_size", "batch_sizes", "temperature", "repeats", "peer", "quantize",
            "cache_len", "sweep_only")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_configs_reproduce_recorded_runs(path):
    """Each experiment config expands to the settings of the run recorded from it."""
    import shlex

    from specjax.cli import build_parser, expand_config
    from specjax.experiment import load_config

    cfg = load_config(path)
    parser = build_parser()
    ours = parser.parse_args(expand_config(["bench", "--config", str(path)], str(path)))
    recorded = json.loads((RESULTS / Path(cfg.output).name).read_text())["command"]
    theirs = parser.parse_args(shlex.split(recorded)[1:])
    for field in COMPARED:
        assert getattr(ours, field) == getattr(theirs, field), field
    assert sorted(ours.method_arg) == sorted(theirs.method_arg)
    for field in ("output", "plot", "journal"):  # recorded paths may be absolute
        a, b = getattr(ours, field), getattr(theirs, field)
        assert (a and Path(a).name) == (b and Path(b).name), field


def test_bench_config_file_and_overrides(tmp_path, tiny_gguf, prompts_file):
    from specjax.config import ConfigError
    from specjax.experiment import BenchConfig, load_config

    out = tmp_path / "r.json"
    cfg = tmp_path / "exp.py"
    cfg.write_text(
        "from specjax.experiment import BenchConfig\n"
        "def get_config():\n"
        f"    return BenchConfig(model={str(tiny_gguf)!r}, prompts={str(prompts_file)!r},\n"
        "        numerics='fast',\n"
        "        methods=('ar', 'prompt_lookup'), method_args={'prompt_lookup': {'k': 3}},\n"
        f"        max_new_tokens=6, repeats=3, categories=('code',), output={str(out)!r})\n")
    assert main(["bench", "--config", str(cfg), "--repeats", "1"]) == 0
    res = json.loads(out.read_text())
    assert res["repeats"] == 1 and res["categories"] == ["code"]  # the flag overrode the file
    assert "--method-arg prompt_lookup.k=3" in res["command"] and "--config" not in res["command"]
    assert {r["method"] for r in res["rows"]} == {"ar", "prompt_lookup"}
    # bad configs: clear errors naming the file
    cfg.write_text("def get_config():\n    return 3\n")
    with pytest.raises(ConfigError, match=r"exp\.py: get_config\(\) must return a BenchConfig"):
        load_config(cfg)
    cfg.write_text("x = 1\n")
    with pytest.raises(ConfigError, match=r"exp\.py: defines no get_config"):
        load_config(cfg)
    cfg.write_text("from specjax.experiment import BenchConfig\n"
                   "def get_config():\n    return BenchConfig(repeats=0)\n")
    assert main(["bench", "--config", str(cfg)]) == 2
    with pytest.raises(ConfigError, match="not in methods"):
        BenchConfig(method_args={"early_exit": {"k": 2}})
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.py")
    (tmp_path / "notes.md").write_text("# not python\n")
    with pytest.raises(ConfigError, match=r"notes\.md: a config is a Python file"):
        load_config(tmp_path / "notes.md")
    with pytest.raises(ConfigError, match="may not contain '.'"):
        BenchConfig(methods=("ar", "layer_skip@v1.2"))


def test_config_methods_override_drops_their_arguments():
    from specjax.cli import build_parser, expand_config

    trees = str(Path(__file__).resolve().parents[1] / "configs" / "trees.py")
    argv = expand_config(["bench", "--conf", trees, "--methods", "ar,layer_skip@topk"], trees)
    args = build_parser().parse_args(argv)
    assert args.methods == "ar,layer_skip@topk" and args.config is None
    assert sorted(args.method_arg) == ["layer_skip@topk.tree=topk",
                                       "layer_skip@topk.tree_width=2"]


def test_bench_config_quantize_field():
    from specjax.experiment import BenchConfig, ConfigError

    argv = BenchConfig(quantize="w8a8").to_argv()
    assert argv[argv.index("--quantize") + 1] == "w8a8"
    assert "--quantize" not in BenchConfig().to_argv()  # recorded runs expand as before
    with pytest.raises(ConfigError, match="quantize must be"):
        BenchConfig(quantize="int4")


def test_bench_samples_refusals():
    """--samples needs sampling and runs without --batch-sizes or --mesh; refused before any
    model is loaded."""
    from specjax.bench import BenchConfig
    from specjax.bench.main import run
    from specjax.experiment import ConfigError

    with pytest.raises(BenchError, match="give a --temperature > 0"):
        run(BenchConfig(samples=4, model="no-such-model"))
    with pytest.raises(BenchError, match="does not combine with --batch-sizes"):
        run(BenchConfig(samples=4, temperature=0.7, batch_sizes=(1, 4), model="no-such-model"))
    with pytest.raises(BenchError, match="does not combine with --mesh"):
        run(BenchConfig(samples=4, temperature=0.7, mesh="data=1", model="no-such-model"))
    with pytest.raises(ConfigError, match="samples must be an integer >= 1"):
        BenchConfig(samples=0)
    assert "--samples" not in BenchConfig().to_argv()  # recorded runs expand as before


def test_bench_config_round_trips_through_the_flags():
    """The CLI builds the config from its flags (BenchConfig.from_args); the flags of a config
    (to_argv) give back the same config, the verify-curve fields included."""
    from specjax.bench import BenchConfig
    from specjax.cli import build_parser

    parser = build_parser()
    for cfg in (BenchConfig(),
                BenchConfig(methods=("ar", "prompt_lookup", "early_exit@t"),
                            method_args={"prompt_lookup": {"k": "4"},
                                         "early_exit@t": {"tree": "topk", "exit_layer": "1"}},
                            model="random:smollm2-135m", dtype="bfloat16", quantize="w8a8",
                            attention_impl="xla", prompts="mt_bench", categories=("qa", "code"),
                            limit=2, max_new_tokens=9, batch_size=2, batch_sizes=(1, 4),
                            temperature=0.5, repeats=1, peer="hf", output="o.json",
                            plot="p.png", journal="j.jsonl", time_limit=1.5),
                BenchConfig(verify_curve=True, in_loop=True, curve_ks=(1, 2, 17),
                            curve_batches=(2,), curve_prefix=8),
                BenchConfig(samples=8, temperature=0.7),
                BenchConfig(batch_sizes=(4, 16), sweep_only=True)):
        args = parser.parse_args(["bench", *cfg.to_argv()])
        assert BenchConfig.from_args(args) == cfg
    # the curve flags are read with --verify-curve only, as before
    args = parser.parse_args(["bench", "--curve-ks", "2,1"])
    assert BenchConfig.from_args(args).curve_ks == BenchConfig().curve_ks
    with pytest.raises(BenchError, match="--curve-ks"):
        BenchConfig.from_args(parser.parse_args(["bench", "--verify-curve", "--curve-ks", "2,1"]))


def test_first_run_after_compile_is_not_timed(tmp_path, tiny_gguf, prompts_file, monkeypatch):
    """The first execution of a freshly compiled program pays one-time set-up: the bench
    times a second run instead and books the excess with the compile time. Planted here as
    5 s added to every run that compiled."""
    import specjax.engine as engine

    real = engine.generate

    def slow_first(*args, **kwargs):
        r = real(*args, **kwargs)
        if r.compile_s > 0:
            r.wall_s = [w + 5.0 for w in r.wall_s]
        return r

    monkeypatch.setattr(engine, "generate", slow_first)
    monkeypatch.setattr(engine, "COMPILED", engine._Compiled())  # compile afresh here
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file)
    for r in res["rows"]:
        # the excess booked is (first run - timed run): the planted 5 s, less the timed run's
        # own noise (a fresh clone measured 4.996 s once: the timed run 4 ms slower)
        assert r["compile_s"] >= 4.5, (r["method"], r["category"])
        # 12 tokens in well under 5 s: no timed run carries the planted 5 s
        assert r["tokens_per_s_min"] > 12 / 5.0 * 2, (r["method"], r["category"])


def test_bench_policy_axis(tmp_path, tiny_gguf, prompts_file):
    """--policies: each drafting method under each policy, interleaved against the same ar;
    each variant's recorded config names its policy; outputs identical to ar."""
    out = tmp_path / "res.json"
    assert main(["bench", "--model", str(tiny_gguf), "--numerics", "fast",
                 "--methods", "ar,prompt_lookup",
                 "--method-arg", "prompt_lookup.k=4", "--prompts", str(prompts_file),
                 "--max-new-tokens", "6", "--repeats", "1", "--policies", "fixed,heuristic",
                 "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {r["method"]: r for r in res["rows"] if r["category"] == "ALL"}
    assert set(rows) == {"ar", "prompt_lookup@fixed", "prompt_lookup@heuristic"}
    for m in ("prompt_lookup@fixed", "prompt_lookup@heuristic"):
        assert rows[m]["config"]["policy"] == m.split("@")[1] and rows[m]["config"]["k"] == 4
        assert rows[m]["identical_to_ar"] is True
    assert main(["bench", "--model", str(tiny_gguf), "--prompts", str(prompts_file),
                 "--policies", "sometimes"]) == 2
    assert main(["bench", "--model", str(tiny_gguf), "--prompts", str(prompts_file),
                 "--method-arg", "prompt_lookup.policy=fixed", "--policies", "fixed"]) == 2


def test_bench_mesh_flag(tmp_path, tiny_gguf, prompts_file, capsys):
    """--mesh reaches the engine (a one-device data mesh runs; a mesh larger than the
    machine is a clear error) and is recorded."""
    out = tmp_path / "res.json"
    assert main(["bench", "--model", str(tiny_gguf), "--numerics", "fast", "--methods", "ar",
                 "--prompts", str(prompts_file), "--max-new-tokens", "4", "--repeats", "1",
                 "--mesh", "data=1", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["mesh"] == "data=1"
    capsys.readouterr()
    assert main(["bench", "--model", str(tiny_gguf), "--numerics", "fast", "--prompts",
                 str(prompts_file), "--mesh", "data=64"]) == 2
    assert "needs 64 devices" in capsys.readouterr().err


def test_median_seconds_times_after_one_warm_call(monkeypatch):
    """The scripts' timing rule: one untimed call, then the median of `repeats` timed ones."""
    from specjax.bench import timing

    clock = iter([0.0, 3.0, 10.0, 11.0, 20.0, 25.0])  # timed calls of 3, 1 and 5 seconds
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    calls = []
    assert timing.median_seconds(lambda x: calls.append(x), 7, repeats=3) == 3.0
    assert calls == [7, 7, 7, 7]
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        timing.median_seconds(lambda: None, repeats=0)


def test_bench_cache_len(tmp_path, tiny_gguf, prompts_file, monkeypatch, capsys):
    """--cache-len gives every generate call of the run one static cache length (one decode
    loop per method and batch size, whatever the prompt lengths), is recorded, and a prompt
    that does not fit with its budget is refused, naming the length it needs."""
    import specjax.engine as engine
    from specjax.bench import BenchConfig
    from specjax.experiment import ConfigError

    with pytest.raises(ConfigError, match="cache_len must be an integer >= 1"):
        BenchConfig(cache_len=0)
    out = tmp_path / "res.json"
    argv = ["bench", "--model", str(tiny_gguf), "--numerics", "fast", "--methods", "ar",
            "--prompts", str(prompts_file), "--max-new-tokens", "12", "--repeats", "1",
            "--output", str(out)]
    assert main(argv + ["--cache-len", "20"]) == 2
    assert re.search(r"--cache-len 20 does not hold 3 prompt\(s\).*needs at least \d+",
                     capsys.readouterr().err)
    seen = []
    real = engine.generate

    def spy(*a, **kw):
        seen.append(kw.get("cache_len"))
        return real(*a, **kw)

    monkeypatch.setattr(engine, "generate", spy)
    assert main(argv + ["--cache-len", "128"]) == 0
    res = json.loads(out.read_text())
    assert len(seen) >= 2 and set(seen) == {128}  # both categories' batches
    assert res["cache_len"] == 128


def test_bench_with_the_pallas_kernels(tmp_path, tiny_gguf, prompts_file, capsys):
    """--exact-products pallas: the run decodes with the batch-invariant kernels (interpreted
    here), outputs identical, the setting recorded in the result, its rows and the journal
    (which then refuses a run with the default products); with --numerics fast it is refused."""
    out, journal = tmp_path / "p.json", tmp_path / "p.journal.jsonl"
    args = ["bench", "--model", str(tiny_gguf), "--methods", "ar,prompt_lookup", "--prompts",
            str(prompts_file), "--max-new-tokens", "6", "--repeats", "1", "--limit", "1",
            "--method-arg", "prompt_lookup.policy=fixed", "--journal", str(journal)]
    assert main(args + ["--exact-products", "pallas", "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    assert "--exact-products pallas" in res["command"] and res["exact_products"] == "pallas"
    assert {r.get("exact_products") for r in res["rows"]} == {"pallas"}
    assert {r["identical_to_ar"] for r in res["rows"] if r["method"] == "prompt_lookup"} == {True}
    header = json.loads(journal.read_text().splitlines()[0])["header"]
    assert header["exact_products"] == "pallas"
    capsys.readouterr()
    assert main(args) == 2  # the journal will not mix kernels
    assert "exact_products" in capsys.readouterr().err
    assert main(["bench", "--model", str(tiny_gguf), "--numerics", "fast",
                 "--exact-products", "pallas", "--prompts", str(prompts_file)]) != 0
    assert "needs --numerics exact" in capsys.readouterr().err
    assert main(["generate", "--model", str(tiny_gguf), "--numerics", "fast",
                 "--exact-products", "pallas", "--prompt", "x"]) == 2
    assert "needs --numerics exact" in capsys.readouterr().err
