"""A head's measured first-token acceptance, recorded in its config.json
(specjax.heads.measured; `specjax head record-acceptance` from a bench journal, `specjax head
measure-acceptance` by decoding: specjax.bench.acceptance)."""

import dataclasses
import json
from pathlib import Path

import pytest

from specjax.bench.journal import first_token_counts
from specjax.cli import main
from specjax.errors import BenchError, CheckpointError
from specjax.heads import measured
from specjax.heads.shipped import ROOT

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def journal(path, label="medusa@chain", temperature=0.0, tree=None, runs=(), head="x/h",
            exact=True, sweep_runs=()):
    """A bench journal: a header, one line of ``runs`` as (drafted_at, accepted_at) and one
    of a batch-size sweep's ``sweep_runs``."""
    conf = {"method": "medusa", "description": f"medusa heads /somewhere/{head} (step 3)",
            "exact": exact, "verifier": "exact" if exact else "typical"}
    if tree:
        conf["tree"] = tree
    lines = [{"header": {"temperature": temperature, "batch_size": 1, "prompts": "p.jsonl",
                         "n_prompts": len(runs), "method_args": {label: {"k": "3"}},
                         "configs": {"ar": {"method": "ar"}, label: conf}}},
             {"group": "g", "runs": [{"method": "ar", "drafted_at": None}] + [
                 {"method": label, "drafted_at": d, "accepted_at": a} for d, a in runs]},
             {"group": "s", "sweep": True, "runs": [
                 {"method": label, "drafted_at": d, "accepted_at": a} for d, a in sweep_runs]}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def head_dir(path, extra=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"format": "specjax-medusa-1",
                                                  "meta": {"step": 3}, **(extra or {})}))
    return path


def test_counts_first_tokens_and_records_one_per_temperature(tmp_path):
    j = journal(tmp_path / "j.jsonl", runs=[([10, 5, 5], [4, 1, 0]), ([6, 2], [2, 1]),
                                            (None, None)], sweep_runs=[([50], [50])])
    rec, ran = first_token_counts(j, "medusa@chain")
    assert ran == "medusa heads /somewhere/x/h (step 3)"
    assert (rec.temperature, rec.accepted, rec.drafted, rec.rate) == (0.0, 6, 16, 6 / 16)
    assert rec.method_args == {"k": "3"} and rec.source == "j.jsonl"
    h = head_dir(tmp_path / "h")
    (h / "config.json").chmod(0o644)
    assert measured.record(h, rec) is None
    assert (h / "config.json").stat().st_mode & 0o777 == 0o644  # its permissions kept
    hot, _ = first_token_counts(journal(tmp_path / "k.jsonl", temperature=0.7,
                                        runs=[([8], [2])]), "medusa@chain")
    measured.record(h, hot)
    again = measured.AcceptanceRecord(0.0, 3, 4)
    assert measured.record(h, again) == rec  # replaces the greedy record, keeps the other
    conf = json.loads((h / "config.json").read_text())
    assert conf["meta"] == {"step": 3} and conf["format"] == "specjax-medusa-1"
    assert [(r["temperature"], r["accepted"], r["drafted"]) for r in conf[measured.KEY]] == [
        (0.0, 3, 4), (0.7, 2, 8)]
    assert measured.acceptance_for(h, 0.0).rate == 0.75
    assert measured.acceptance_for(h, 1.3).rate == 0.25  # the nearest positive temperature
    assert measured.acceptance_for(h, None) is None
    assert measured.acceptance_for(None, 0.0) is None
    only_hot = head_dir(tmp_path / "g")
    measured.record(only_hot, hot)
    assert measured.acceptance_for(only_hot, 0.0) is None  # sampled figures not used greedy


def test_bad_journals_and_records_are_named(tmp_path):
    j = journal(tmp_path / "t.jsonl", tree="fixed(N=3, D=2)", runs=[([4], [1])])
    with pytest.raises(BenchError, match="drafted a tree"):
        first_token_counts(j, "medusa@chain")
    with pytest.raises(BenchError, match="no method 'hydra'; it holds ar, medusa@chain"):
        first_token_counts(j, "hydra")
    lossy = journal(tmp_path / "l.jsonl", runs=[([4], [3])], exact=False)
    with pytest.raises(BenchError, match="lossy verifier"):
        first_token_counts(lossy, "medusa@chain")
    bad_run = journal(tmp_path / "b.jsonl", runs=[(["x"], [1])])
    with pytest.raises(BenchError, match="a malformed run of 'medusa@chain'"):
        first_token_counts(bad_run, "medusa@chain")
    idle = journal(tmp_path / "i.jsonl", runs=[([0, 0], [0, 0])])
    with pytest.raises(BenchError, match="drafted no token"):
        first_token_counts(idle, "medusa@chain")
    (tmp_path / "x.jsonl").write_text('{"group": 1}\n')
    with pytest.raises(BenchError, match="line 1 is not a header"):
        first_token_counts(tmp_path / "x.jsonl", "medusa@chain")
    (tmp_path / "y.jsonl").write_text("{not json\n")
    with pytest.raises(BenchError, match="line 1 is not a header"):
        first_token_counts(tmp_path / "y.jsonl", "medusa@chain")
    for recs, msg in (({"a": 1}, "must be a list"),
                      ([{"temperature": 0.0, "accepted": 3}], r"\[0\] lacks drafted"),
                      ([{"temperature": 0.0, "accepted": 5, "drafted": 4}],
                       "0 <= accepted <= drafted"),
                      ([{"temperature": -1, "accepted": 1, "drafted": 4}], "temperature >= 0"),
                      ([{"temperature": "hot", "accepted": 1, "drafted": 4}], "hot"),
                      (["x"], "must be an object")):
        # (and a config that is no JSON object at all, below)
        h = head_dir(tmp_path / "bad", {measured.KEY: recs})
        with pytest.raises(CheckpointError, match=msg) as e:
            measured.acceptance_for(h, 0.0)
        assert "config.json" in str(e.value)
        with pytest.raises(CheckpointError):  # nothing is written over a malformed file
            measured.record(h, measured.AcceptanceRecord(0.0, 1, 2))
        assert json.loads((h / "config.json").read_text())[measured.KEY] == recs
    (tmp_path / "bad" / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="must be a JSON object"):
        measured.read_records(tmp_path / "bad")


def test_record_acceptance_command(tmp_path, capsys):
    h = head_dir(tmp_path / "x" / "h")
    j = journal(tmp_path / "j.jsonl", runs=[([10], [4])])
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                 "--head", str(h), "--dry-run"]) == 0
    assert "accepted 4 of 10 (0.400)" in capsys.readouterr().out
    assert measured.KEY not in json.loads((h / "config.json").read_text())
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                 "--head", str(h)]) == 0
    assert measured.acceptance_for(h, 0.0).rate == 0.4
    again = journal(tmp_path / "k.jsonl", runs=[([10], [5])])
    assert main(["head", "record-acceptance", str(again), "--method", "medusa@chain",
                 "--head", str(h)]) == 0
    assert "replaced the record at temperature 0: accepted 4 of 10" in capsys.readouterr().out
    # every training run writes OUT/head: the parent must match too, and the step
    for other, why in ((head_dir(tmp_path / "y" / "h"), "not the head in"),
                       (head_dir(tmp_path / "h2"), "not the head in")):
        assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                     "--head", str(other)]) == 2
        assert why in capsys.readouterr().err
        assert measured.KEY not in json.loads((other / "config.json").read_text())
    later = head_dir(tmp_path / "z" / "x" / "h")
    (later / "config.json").write_text(json.dumps({"meta": {"step": 4}}))
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                 "--head", str(later)]) == 2
    assert "step 3; the head in" in capsys.readouterr().err
    (later / "config.json").write_text("{broken")
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                 "--head", str(later)]) == 2
    assert "unreadable head config" in capsys.readouterr().err
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@tree",
                 "--head", str(h)]) == 2
    assert "no method 'medusa@tree'" in capsys.readouterr().err


@pytest.mark.parametrize("name,label,journal_name,temperature", [
    ("medusa", "medusa", "spec_bench_heads_mh_default", 0.0),
    ("medusa", "medusa@chain", "spec_bench_medusa_tree3_sampling", 0.7),
    ("hydra", "hydra", "spec_bench_heads_mh_default", 0.0),
    ("hydra", "hydra", "spec_bench_hydra_sampling", 0.7),
    ("eagle3", "eagle", "spec_bench_eagle_tree3", 0.0),
    ("eagle3", "eagle", "eagle_tree3_sampling_b1", 0.7),
])
def test_shipped_records_match_their_journals(name, label, journal_name, temperature):
    """Each record shipped in a head file counts what its recorded journal holds."""
    j = RESULTS / f"{journal_name}.journal.jsonl"
    if not j.is_file():
        pytest.skip(f"{j} not in this checkout")
    head = ROOT / f"smollm2-135m-{name}"
    rec = measured.acceptance_for(head, temperature)
    assert rec is not None and rec.source == j.name and rec.method == label
    assert rec == first_token_counts(j, label)[0]


class Built(Exception):
    """Raised by the stand-in for methods.build once it has seen its arguments."""


def test_runs_pass_their_temperature_to_build(monkeypatch, tiny_gguf):
    """The bench and `specjax generate` tell methods.build the temperature they sample at
    (without it a head's sampled record is not used)."""
    import types

    import specjax.methods
    from specjax.bench import runner

    seen = []

    def spy(name, lm, args=None, **kw):
        seen.append((name, kw))
        raise Built(name)

    monkeypatch.setattr(runner, "build", spy)
    lm = types.SimpleNamespace(tokenizer=types.SimpleNamespace(
        eos_ids=[0], encode_chat=lambda p: [1, 2, 3]))
    with pytest.raises(Built):
        runner.run_bench(lm, [{"prompt": "x", "id": "a", "category": "c"}], ["medusa"], {},
                         max_new_tokens=4, batch_size=2, temperature=0.7, repeats=1)
    assert seen[-1][1]["temperature"] == 0.7 and seen[-1][1]["greedy"] is False

    class BuiltError(CheckpointError):
        pass

    def spy_cli(name, lm, args=None, **kw):
        seen.append((name, kw))
        raise BuiltError("seen")

    monkeypatch.setattr(specjax.methods, "build", spy_cli)
    assert main(["generate", "--model", str(tiny_gguf), "--method", "medusa",
                 "--temperature", "0.6", "--prompt", "x"]) == 2
    assert seen[-1][0] == "medusa" and seen[-1][1]["temperature"] == 0.6


def _tiny_medusa(lm, path):
    """An untrained Medusa head for the tiny target, saved as a head file at ``path``."""
    import numpy as np

    from specjax.heads.medusa import MedusaHeadConfig, init_medusa_heads, save_medusa_heads

    t = lm.model.cfg
    cfg = MedusaHeadConfig(num_heads=2, hidden_size=t.hidden_size, vocab_size=t.vocab_size,
                           draft_vocab=t.vocab_size, target_layers=t.num_layers)
    _, state = init_medusa_heads(cfg, lm.model, np.arange(t.vocab_size))
    return save_medusa_heads(path, cfg, state, np.arange(t.vocab_size), tokenizer=lm.tokenizer)


PROMPTS = [{"id": str(i), "category": c, "prompt": p} for i, (c, p) in enumerate([
    ("qa", "a a a a a a"), ("qa", "abc abc abc abc"),
    ("code", "def f(x): return x; def f(x):")])]


def test_measure_acceptance_drafts_one_token_every_step(tmp_path, tiny_gguf):
    """`specjax head measure-acceptance`'s counts: one drafted token at every step but a
    row's last (no room left), the accepted ones those the answer holds beyond one token a
    forward, the same at any batch size (a row's tokens and drafts do not depend on the
    others), and the same as a `specjax bench` journal of the same method counts."""
    from specjax.bench.acceptance import MEASURE_ARGS, head_method, measure_first_token
    from specjax.bench.journal import Journal
    from specjax.bench.runner import run_bench
    from specjax.engine import generate
    from specjax.methods import build
    from specjax.models.loaders import load

    lm = load(tiny_gguf, numerics="fast")  # the exact forward compiles slowly under -O0
    head = _tiny_medusa(lm, tmp_path / "run" / "head")
    assert head_method(head) == "medusa"
    N = 24  # the tiny model repeats itself on the first prompt: the untrained head's first
    # draft (identity residual, the target's LM head) is the token just written again
    recs = [measure_first_token(lm, head, PROMPTS, prompts="p", max_new_tokens=N,
                                batch_size=b, progress=False) for b in (1, 3)]
    assert recs[0] == dataclasses.replace(recs[1], batch_size=1)
    rec = recs[0]
    assert (rec.method, rec.method_args, rec.n_prompts, rec.temperature) == (
        "medusa", MEASURE_ARGS, 3, 0.0)
    d, pol, ver = build("medusa", lm, {"head": str(head), **MEASURE_ARGS})
    enc = [lm.tokenizer.encode_chat(it["prompt"]) for it in PROMPTS]
    r = generate(lm.model, enc, max_new_tokens=N, eos_ids=lm.tokenizer.eos_ids,
                 batch_size=1, drafter=d, policy=pol, verifier=ver)
    # the prefill's forward writes one token, each step one plus the one it accepted (an
    # accepted end of sequence ends the row with nothing after it)
    rows, steps = len(PROMPTS), sum(r.target_forwards) - len(PROMPTS)
    assert 0 < rec.accepted
    assert 0 <= rec.accepted - (sum(r.new_tokens) - sum(r.target_forwards)) <= rows
    # every step drafts but perhaps a row's last (one token left in its budget)
    assert steps - rows <= rec.drafted <= steps
    j = Journal(tmp_path / "b.journal.jsonl", {"method_args": {"medusa": MEASURE_ARGS}})
    run_bench(lm, PROMPTS, ["medusa"], {"medusa": {"head": str(head), **MEASURE_ARGS}},
              max_new_tokens=N, batch_size=1, temperature=0.0, repeats=1, journal=j)
    counted, ran = first_token_counts(j.path, "medusa")
    measured.check_same_head(head, ran, "the journal")
    assert (counted.accepted, counted.drafted) == (rec.accepted, rec.drafted)


@pytest.mark.real_model
def test_measure_acceptance_of_the_shipped_hydra_head(smollm2):
    """On the real model the shipped Hydra++ head's first drafted tokens are accepted, and
    the counts agree with the tokens written: each forward writes one token beyond those it
    accepted, and every step of a row drafts one token but perhaps its last."""
    from specjax.bench.acceptance import MEASURE_ARGS, measure_first_token
    from specjax.engine import generate
    from specjax.methods import build

    head = ROOT / "smollm2-135m-hydra"
    rec = measure_first_token(smollm2, head, PROMPTS[:2], prompts="p", max_new_tokens=24,
                              batch_size=2, progress=False)
    d, pol, ver = build("hydra", smollm2, {"head": str(head), **MEASURE_ARGS}, batch=2)
    enc = [smollm2.tokenizer.encode_chat(it["prompt"]) for it in PROMPTS[:2]]
    r = generate(smollm2.model, enc, max_new_tokens=24, eos_ids=smollm2.tokenizer.eos_ids,
                 drafter=d, policy=pol, verifier=ver)
    steps = sum(r.target_forwards) - 2  # less the prefill's forward
    assert 0 < rec.accepted
    assert 0 <= rec.accepted - (sum(r.new_tokens) - sum(r.target_forwards)) <= 2  # an EOS
    assert steps - 2 <= rec.drafted <= steps
    assert rec.method == "hydra" and rec.n_prompts == 2


def test_measure_acceptance_command(tmp_path, tiny_gguf, capsys):
    """`specjax head measure-acceptance DIR` writes one record per temperature, which the
    batched default then starts from; bad input is named before anything is decoded."""
    from specjax.methods import build
    from specjax.models.loaders import load

    lm = load(tiny_gguf, numerics="fast")
    head = _tiny_medusa(lm, tmp_path / "head")
    pf = tmp_path / "q.jsonl"
    pf.write_text("".join(json.dumps({"question_id": i, "category": "qa", "turns": [p]}) + "\n"
                          for i, p in enumerate(["hello world hello", "abc abc abc"])))
    base = ["head", "measure-acceptance", "--model", str(tiny_gguf), "--numerics", "fast",
            "--prompts", str(pf), "--max-new-tokens", "8", "--no-progress"]
    assert main([*base, str(head), "--temperatures", "0,0.7", "--dry-run"]) == 0
    assert "not written: --dry-run" in capsys.readouterr().out
    assert measured.read_records(head) == []
    assert main([*base, str(head), "--temperatures", "0,0.7"]) == 0
    out = capsys.readouterr().out
    recs = measured.read_records(head)
    assert [r.temperature for r in recs] == [0.0, 0.7] and out.count("-> ") == 2
    assert all(r.prompts == str(pf) and r.n_prompts == 2 and r.drafted > 0 for r in recs)
    greedy = recs[0]
    policy = build("medusa", lm, {"head": str(head), "k": "2", "draft_cost": "1.0"},
                   batch=4).policy
    assert policy.prior_accepted == pytest.approx(2 * greedy.rate, abs=1e-3)
    for bad, err in [(["--temperatures", "-1"], "distinct finite numbers >= 0"),
                     (["--temperatures", "0,0"], "distinct finite numbers >= 0"),
                     (["--temperatures", "x"], "comma-separated numbers")]:
        assert main([*base, str(head), *bad]) == 2
        assert err in capsys.readouterr().err
    assert main([*base, str(tmp_path / "nowhere")]) == 2
    assert "not a head directory" in capsys.readouterr().err
    for bad, err in [(["--temperatures", "inf"], "distinct finite numbers >= 0"),
                     (["--max-new-tokens", "1"], "max_new_tokens must be an integer >= 2"),
                     (["--batch-size", "0"], "batch_size must be an integer >= 1")]:
        assert main([*base, str(head), *bad]) == 2
        assert err in capsys.readouterr().err
    other = head_dir(tmp_path / "acc", {"format": "specjax-acceptance-1"})
    assert main([*base, str(other)]) == 2
    assert "is not a draft head's" in capsys.readouterr().err
    assert main([*base, str(ROOT / "smollm2-135m-hydra")]) == 2  # its records: the journals'
    assert "copy the directory" in capsys.readouterr().err


def test_head_method_reads_the_format(tmp_path):
    from specjax.bench.acceptance import head_method

    for fmt, name in (("specjax-eagle-1", "eagle"), ("specjax-medusa-1", "medusa"),
                      ("specjax-hydra-1", "hydra")):
        assert head_method(head_dir(tmp_path / name, {"format": fmt})) == name
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8}))
    assert head_method(engine) == "eagle"  # the serving engines' EAGLE-3 layout
    for i, text in enumerate([json.dumps({"format": None}), "[1, 2]", "{not json"]):
        d = tmp_path / f"bad{i}"
        d.mkdir()
        (d / "config.json").write_text(text)
        with pytest.raises(CheckpointError, match="config.json"):
            head_method(d)
    with pytest.raises(CheckpointError, match="unreadable head config"):
        head_method(tmp_path / "missing")
