"""`specjax bench` end to end on a tiny random model written as a GGUF file."""

import json

import pytest

from gguf_fixtures import VOCAB_SIZE, write_gguf
from specjax.bench import BenchError, load_prompts, parse_bench_method_args
from specjax.cli import main
from specjax.config import tiny_config
from specjax.models.loaders import random_model
from specjax.models.weights import model_to_tensors


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    cfg = tiny_config(vocab_size=VOCAB_SIZE, num_layers=2)
    path = tmp_path_factory.mktemp("m") / "tiny.gguf"
    write_gguf(path, cfg, model_to_tensors(random_model(cfg, seed=3)))
    return path


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
    out = tmp_path / "res.json"
    png = tmp_path / "res.png"
    rc = main(["bench", "--model", str(model), "--methods", "ar,prompt_lookup,early_exit",
               "--method-arg", "prompt_lookup.k=4", "--method-arg", "early_exit.exit_layer=1",
               "--prompts", str(prompts), "--max-new-tokens", "12", "--repeats", "2",
               "--output", str(out), "--plot", str(png), *extra])
    assert rc == 0
    return json.loads(out.read_text()), png


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
    assert "speedup" in capsys.readouterr().out


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
    res, _ = run_bench(tmp_path, tiny_gguf, prompts_file)
    flags = {(r["method"], r["category"]): r["identical_to_ar"] for r in res["rows"]}
    assert flags[("early_exit", "ALL")] is False
    assert flags[("prompt_lookup", "ALL")] is True


def test_bench_inputs(tmp_path, prompts_file):
    items = load_prompts(str(prompts_file), ["code"])
    assert [i["id"] for i in items] == [3]
    assert len(load_prompts("builtin", limit=1)) == len({c for c, _ in
                                                         __import__("specjax.bench").bench.BUILTIN})
    with pytest.raises(BenchError, match="unknown categories \\['poetry'\\]"):
        load_prompts(str(prompts_file), ["poetry"])
    with pytest.raises(BenchError, match="METHOD.key=value"):
        parse_bench_method_args(["k=3"], ["ar", "prompt_lookup"])
    with pytest.raises(BenchError, match="not in --methods"):
        parse_bench_method_args(["medusa.k=3"], ["ar", "prompt_lookup"])
    assert main(["bench", "--methods", "ar,telepathy", "--prompts", str(prompts_file)]) == 2


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


def test_verify_curve_command(tmp_path, tiny_gguf):
    out = tmp_path / "curve.json"
    assert main(["bench", "--verify-curve", "--model", str(tiny_gguf), "--curve-ks", "1,2,4",
                 "--curve-batches", "1,2", "--curve-prefix", "8", "--output", str(out),
                 "--plot", str(tmp_path / "c.png")]) == 0
    curve = json.loads(out.read_text())
    assert curve["ks"] == [1, 2, 4] and set(curve["relative"]) == {"1", "2"}
    for B in ("1", "2"):
        assert curve["relative"][B][0] == 1.0
        assert all(s > 0 for s in curve["seconds"][B])
    assert (tmp_path / "c.png").exists()
