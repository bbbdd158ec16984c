"""`specjax train prompts` (user turns written by the target: Magpie), the corpus built from a
prompt file, and training on several corpora at once."""

from __future__ import annotations

import dataclasses
import json

import pytest

import specjax.engine
from specjax.errors import ConfigError, DataError
from specjax.models.loaders import load
from specjax.train import magpie
from specjax.train.batches import Corpus
from specjax.train.corpus import CorpusConfig, build_corpus, read_shard, shard_name
from specjax.train.magpie import MagpieConfig, read_prompt_file, write_prompts


@pytest.fixture(scope="module")
def tiny_lm(tiny_gguf):
    return load(tiny_gguf, numerics="fast")


def _quiet(_msg):
    pass


def test_user_turn_prefix_is_the_template_up_to_the_users_text(tiny_lm):
    tok = tiny_lm.tokenizer
    ids = magpie.user_turn_prefix(tok, None)
    whole = tok.encode_chat("hello there")
    assert whole[:len(ids)] == ids and len(whole) > len(ids)
    assert tok.decode(ids).endswith("user\n")
    with_sys = magpie.user_turn_prefix(tok, magpie.SYSTEMS["coding"])
    assert "write, explain or fix code" in tok.decode(with_sys)


def test_clean_message_rules():
    assert magpie.clean_message("  How do I bake bread?<|im_end|>", 4) == (
        "How do I bake bread?", "kept")
    assert magpie.clean_message("Too short<|im_end|>", 4) == (None, "short")
    assert magpie.clean_message("a b c <|im_start|>assistant d", 2) == (None, "marker")


class _FakeGenerate:
    """Stands in for the engine: row ``j`` of chunk ``c`` (by its seed) answers a scripted
    message; ``cut`` rows run out of budget."""

    def __init__(self, tok, script):
        self.tok, self.script, self.calls = tok, script, []

    def __call__(self, model, prompts, *, max_new_tokens, sampling, eos_ids, batch_size):
        self.calls.append((len(prompts), sampling.seed, sampling.temperature, sampling.top_p))
        texts = self.script(sampling.seed, len(prompts))
        tokens, stops = [], []
        for t in texts:
            if t is None:
                tokens.append(self.tok.encode("x" * 3, add_bos=False))
                stops.append("max_new_tokens")
            else:
                tokens.append(self.tok.encode(t, add_bos=False) + [eos_ids[0]])
                stops.append("eos")
        n = len(prompts)
        return specjax.engine.GenerationResult(tokens, [list(p) for p in prompts], [1] * n,
                                               [0.0] * n, [0.0] * n, 0.0, stops)


def _script(seed, n):
    out = []
    for j in range(n):
        if j == 0:
            out.append(None)                            # cut: dropped
        elif j == 1:
            out.append("too short")                     # dropped
        elif j == 2:
            out.append("Please tell me about the sea.")  # repeated in every chunk
        else:
            out.append(f"Question number {j} of seed {seed} about anything?")
    return out


def test_write_prompts_drops_dedupes_and_resumes(tmp_path, tiny_lm, monkeypatch):
    fake = _FakeGenerate(tiny_lm.tokenizer, _script)
    monkeypatch.setattr(specjax.engine, "generate", fake)
    out = tmp_path / "p.jsonl"
    cfg = MagpieConfig(out=str(out), num_prompts=9, chunk_size=6, batch_size=4, seed=5)
    meta = write_prompts(cfg, tiny_lm, progress=False, max_chunks=1, log=_quiet)
    assert meta["chunks_done"] == 1 and meta["kept"] == 4
    assert meta["dropped"] == {"cut": 1, "short": 1}
    first = read_prompt_file(out)
    assert [it.source for it in first] == ["magpie"] * 4
    assert all(it.task in magpie.SYSTEMS for it in first)
    # the same command continues: the sea question is a duplicate now, the rest is new
    meta = write_prompts(cfg, tiny_lm, progress=False, log=_quiet)
    items = read_prompt_file(out)
    assert len(items) == 9 and items[:4] == first
    assert meta["dropped"]["duplicate"] == meta["chunks_done"] - 1
    assert len({it.prompt for it in items}) == 9 and len({it.id for it in items}) == 9
    seeds = [c[1] for c in fake.calls]
    assert len(set(seeds)) == len(seeds), "every chunk samples with its own seed"
    assert all(c[2] == 1.0 and c[3] == 0.95 for c in fake.calls)
    # complete: nothing is sampled again
    n = len(fake.calls)
    write_prompts(cfg, tiny_lm, progress=False, log=_quiet)
    assert len(fake.calls) == n
    # other settings on the same file: refused, naming the setting
    with pytest.raises(ConfigError, match="temperature"):
        write_prompts(MagpieConfig(out=str(out), num_prompts=9, chunk_size=6, seed=5,
                                   temperature=0.7), tiny_lm, progress=False, log=_quiet)
    # a hand-edited file: refused
    out.write_text(out.read_text().splitlines()[0] + "\n")
    with pytest.raises(DataError, match="edited"):
        write_prompts(cfg, tiny_lm, progress=False, log=_quiet)


def test_bad_settings_and_files(tmp_path):
    with pytest.raises(ConfigError, match="temperature"):
        MagpieConfig(out="x", temperature=0.0)
    with pytest.raises(ConfigError, match="systems"):
        MagpieConfig(out="x", systems=("nope",))
    f = tmp_path / "dup.jsonl"
    row = {"id": "a", "source": "s", "task": "t", "prompt": "p"}
    f.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match="unique"):
        read_prompt_file(f)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no prompts"):
        read_prompt_file(tmp_path / "empty.jsonl")
    with pytest.raises(DataError, match="cannot read"):
        read_prompt_file(tmp_path / "missing.jsonl")
    stray = tmp_path / "stray.jsonl"
    stray.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match="meta.json"):
        write_prompts(MagpieConfig(out=str(stray)), object(), progress=False, log=_quiet)


def test_the_real_sampler_writes_what_the_rules_allow(tmp_path, tiny_lm):
    """On the tiny random model: the plumbing (prefixes, end-of-turn ids, seeds) end to end."""
    out = tmp_path / "p.jsonl"
    cfg = MagpieConfig(out=str(out), num_prompts=50, chunk_size=8, batch_size=8,
                       max_new_tokens=24, min_words=1, temperature=1.5, top_p=1.0)
    meta = write_prompts(cfg, tiny_lm, progress=False, max_chunks=2, log=_quiet)
    assert meta["chunks_done"] == 2 and meta["rows"] == 16
    assert meta["kept"] + sum(meta["dropped"].values()) == 16
    for it in (read_prompt_file(out) if meta["kept"] else []):
        assert it.prompt == it.prompt.strip() and "<|im_" not in it.prompt


def test_corpus_from_a_prompt_file_and_training_on_two_corpora(tmp_path, tiny_gguf, tiny_lm):
    pf = tmp_path / "prompts.jsonl"
    topics = ("the moon landing", "baking sourdough bread", "learning to play chess",
              "planning a trip to Lisbon", "writing a cover letter")
    rows = [{"id": f"m{i}", "source": "magpie", "task": "chat",
             "prompt": f"Can you help me with {t}?"} for i, t in enumerate(topics)]
    pf.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evalf = tmp_path / "q.jsonl"
    evalf.write_text(json.dumps({"question_id": "e", "turns": [rows[3]["prompt"]]}) + "\n")
    cfgs = [CorpusConfig(out_dir=str(tmp_path / name), model=str(tiny_gguf), num_prompts=n,
                         max_new_tokens=4, batch_size=2, shard_size=2, max_prompt_tokens=256,
                         exclude=(f"spec_bench:{evalf}",), **kw)
            for name, n, kw in (("a", 4, {"prompts_file": str(pf)}),
                                ("b", 3, {"sources": ("topics",)}))]
    ma = build_corpus(cfgs[0], tiny_lm, progress=False, log=_quiet)
    assert ma["refused"]["exact"] == 1 and ma["num_records"] == 4
    assert ma["config"]["prompts_file"] == str(pf)
    recs = [r for s in ma["shards"] for r in read_shard(tmp_path / "a" / s)]
    assert sorted(r["id"] for r in recs) == ["m0", "m1", "m2", "m4"]
    # the same corpus with the prompt file moved: complete, nothing to do; sources instead of
    # a prompt file: refused, naming the setting
    moved = tmp_path / "moved.jsonl"
    pf.rename(moved)
    again = build_corpus(dataclasses.replace(cfgs[0], prompts_file=str(moved)), tiny_lm,
                         progress=False, log=_quiet)
    assert again["num_records"] == 4
    with pytest.raises(ConfigError, match="prompts_file"):
        build_corpus(dataclasses.replace(cfgs[0], prompts_file=None), tiny_lm,
                     progress=False, log=_quiet)
    mb = build_corpus(cfgs[1], tiny_lm, progress=False, log=_quiet)
    both = Corpus.open(f"{tmp_path / 'a'},{tmp_path / 'b'}",
                       tiny_lm.tokenizer and ma["tokenizer_sha256"])
    assert len(both) == ma["num_records"] + mb["num_records"]
    got = [r["tokens"].tolist() for r in both.iter_records()]
    want = ([r["tokens"].tolist() for r in Corpus.open(tmp_path / "a").iter_records()]
            + [r["tokens"].tolist() for r in Corpus.open(tmp_path / "b").iter_records()])
    assert got == want
    assert both.fingerprint()["num_records"] == len(both)
    assert both.fingerprint()["shards"][0] == f"a/{shard_name(0)}"
    tr, va = both.split(0.3, 0)
    assert len(tr) + len(va) == len(both)
    with pytest.raises(DataError, match="named twice"):
        Corpus.open(f"{tmp_path / 'a'},{tmp_path / 'a'}")
    with pytest.raises(DataError, match="not found"):
        Corpus.open(f"{tmp_path / 'a'},{tmp_path / 'nope'}")
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    m["tokenizer_sha256"] = "0" * 64
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match="different tokenizers"):
        Corpus.open(f"{tmp_path / 'a'},{tmp_path / 'b'}")
