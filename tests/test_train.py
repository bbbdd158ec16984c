"""The training machinery (``specjax.train``): config, corpus reading and batches, checkpoints,
the loop, bit-exact resume and the ``specjax train`` command, on a tiny random model and a
corpus written here.

The toy task is a linear next-token head on the target's final hidden state (with dropout, so
the per-step keys matter); the corpus holds counting sequences (``t, t+1, t+2, ...`` modulo
the vocabulary), which that head can learn quickly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from flax import nnx

from specjax.config import tiny_config
from specjax.errors import CheckpointError, ConfigError, DataError
from specjax.models.loaders import LoadedModel, random_model
from specjax.train import TASKS, TrainConfig, fit, load_train_config, replace_from_flags
from specjax.train.batches import (
    FORMAT,
    BatchIterator,
    Corpus,
    eval_batches,
    tokenizer_sha256,
)
from specjax.train.checkpoint import Checkpointer

VOCAB = 64
TOY = "toy_next_token"


# ----------------------------------------------------------------------------- toy task


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    dropout: float = 0.1


class ToyTask:
    """A linear head ``[D, V]`` on the frozen target's final hidden state predicting the
    next token where the loss mask says so."""

    name = TOY

    def __init__(self, cfg: ToyConfig, lm):
        self.cfg = cfg
        self.graphdef, self._state = nnx.split(lm.model)
        self.D, self.V = lm.config.hidden_size, lm.config.vocab_size

    def init_params(self, rng):
        return {"w": 0.02 * jax.random.normal(rng, (self.D, self.V)),
                "b": jnp.zeros((self.V,))}

    def frozen(self):
        return self._state

    def loss(self, params, frozen, batch, rng):
        model = nnx.merge(self.graphdef, frozen)
        tokens = batch["tokens"]
        B, T = tokens.shape
        pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
        h = model(tokens, pos, model.init_cache(B, T), compute_logits=False).final_hidden
        h = jax.lax.stop_gradient(h[:, :-1])
        keep = jax.random.bernoulli(rng, 1.0 - self.cfg.dropout, h.shape)
        h = jnp.where(keep, h / (1.0 - self.cfg.dropout), 0.0)
        logits = h @ params["w"] + params["b"]
        target = tokens[:, 1:]
        m = batch["loss_mask"][:, 1:].astype(jnp.float32)
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), target[..., None], -1)[..., 0]
        n = jnp.maximum(m.sum(), 1.0)
        acc = ((jnp.argmax(logits, -1) == target) * m).sum() / n
        return (nll * m).sum() / n, {"acc_0": acc}

    def save_head(self, params, path, meta):
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        np.savez(path / "head.npz", **{k: np.asarray(v) for k, v in params.items()})
        (path / "meta.json").write_text(json.dumps(meta))


if TOY not in TASKS:
    TASKS.register(TOY, config=ToyConfig)(lambda cfg, lm: ToyTask(cfg, lm))


# ----------------------------------------------------------------------------- fixtures


def counting_records(n: int, seed: int = 0, min_len: int = 6, max_len: int = 20) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        L = int(rng.integers(min_len, max_len + 1))
        start = int(rng.integers(0, VOCAB))
        toks = [(start + k) % VOCAB for k in range(L)]
        out.append({"tokens": toks, "loss_mask": [0] * 3 + [1] * (L - 3),
                    "source": f"test:{i}", "task": "count"})
    return out


def write_corpus(path: Path, records: list[dict], *, sha: str = "test-sha", shards: int = 1,
                 **manifest_overrides) -> Path:
    """A corpus in the builder's format: manifest.json + ArrayRecord shards."""
    path.mkdir(parents=True, exist_ok=True)
    names = []
    for s in range(shards):
        name = f"data-{s:05d}-of-{shards:05d}.array_record"
        w = ArrayRecordWriter(str(path / name), "group_size:1")
        for r in records[s::shards]:
            w.write(json.dumps(r).encode())
        w.close()
        names.append(name)
    # the global record order is shard by shard
    manifest = {"format": FORMAT, "tokenizer_sha256": sha, "model": "tiny", "shards": names,
                "num_records": len(records),
                "num_tokens": sum(len(r["tokens"]) for r in records)}
    manifest.update(manifest_overrides)
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.fixture(scope="module")
def lm():
    cfg = tiny_config(vocab_size=VOCAB)
    model = random_model(cfg, seed=3)
    return LoadedModel(model, None, cfg, "random:tiny", "random")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c", counting_records(48),
                        shards=2)


def small_config(corpus_dir, out_dir, **kw) -> TrainConfig:
    base = dict(task=TOY, data=str(corpus_dir), out_dir=str(out_dir), model="random:tiny",
                val_fraction=0.2, seq_len=16, batch_size=4, lr=3e-2, warmup_steps=1,
                total_steps=6, clip_norm=1.0, save_every=100, eval_every=3, eval_batches=2,
                log_every=1, plot=False, seed=5)
    base.update(kw)
    return TrainConfig(**base)


def leaves_of(out_dir) -> tuple[dict, dict]:
    ck = Checkpointer(Path(out_dir) / "checkpoints")
    try:
        return ck.read_arrays()
    finally:
        ck.close()


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("field,value,match", [
    ("total_steps", 0, "total_steps"),
    ("warmup_steps", 7, "warmup_steps"),
    ("val_fraction", 0.0, "val_fraction"),
    ("val_fraction", 0.6, "val_fraction"),
    ("compute_dtype", "float16", "compute_dtype"),
    ("batch_size", True, "batch_size"),
    ("lr", -1.0, "lr"),
    ("b2", 1.0, "b2"),
    ("max_steps_this_run", 0, "max_steps_this_run"),
    ("mesh", "rows=2", "axes must be among data, model"),
    ("mesh", "data=3", "batch_size .8. must be a multiple of the mesh's data axis .3."),
    ("mesh", 4, "TrainConfig.mesh must be None or a mesh spec"),
    ("task", "", "task"),
    ("task_args", {"x": object()}, "task_args"),
])
def test_config_validation_names_the_field(field, value, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**{"task": TOY, "data": "d", "out_dir": "o", "total_steps": 6,
                       "warmup_steps": 1,
                       field: value})


def test_config_files_and_flags(tmp_path):
    f = tmp_path / "cfg.py"
    f.write_text("from specjax.train import TrainConfig\n"
                 "def get_config():\n"
                 f"    return TrainConfig(task={TOY!r}, data='d', out_dir='o', lr=1e-3)\n")
    cfg = load_train_config(f)
    assert cfg.lr == 1e-3 and cfg.task == TOY
    cfg2 = replace_from_flags(cfg, out_dir="elsewhere", data=None, max_steps_this_run=3)
    assert (cfg2.out_dir, cfg2.data, cfg2.max_steps_this_run) == ("elsewhere", "d", 3)
    assert cfg.differences(cfg2) == []  # out_dir and max_steps_this_run may change
    assert cfg.differences(dataclasses.replace(cfg, lr=2e-3, seed=1)) == ["lr", "seed"]
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="no field 'nope'"):
        replace_from_flags(cfg, nope=1)
    bad = tmp_path / "bad.py"
    bad.write_text("def get_config():\n    return 3\n")
    with pytest.raises(ConfigError, match="bad.py: get_config\\(\\) must return a TrainConfig"):
        load_train_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_train_config(tmp_path / "missing.py")


# ----------------------------------------------------------------------------- corpus


def test_corpus_errors(tmp_path):
    recs = counting_records(4)
    with pytest.raises(DataError, match="corpus directory not found"):
        Corpus.open(tmp_path / "none")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DataError, match="no manifest"):
        Corpus.open(tmp_path / "empty_dir")
    with pytest.raises(DataError, match="format 'other-1'"):
        Corpus.open(write_corpus(tmp_path / "fmt", recs, format="other-1"))
    d = write_corpus(tmp_path / "ok", recs, sha="a" * 64)
    with pytest.raises(DataError, match="another tokenizer") as e:
        Corpus.open(d, tokenizer_sha256="b" * 64)
    assert str(d / "manifest.json") in str(e.value)
    assert len(Corpus.open(d, tokenizer_sha256="a" * 64)) == 4
    with pytest.raises(DataError, match="empty"):
        Corpus.open(write_corpus(tmp_path / "none_recs", [], num_records=0))
    with pytest.raises(DataError, match="the manifest says 9"):
        Corpus.open(write_corpus(tmp_path / "count", recs, num_records=9))
    with pytest.raises(DataError, match="at least 2 records"):
        Corpus.open(write_corpus(tmp_path / "one", recs[:1])).split(0.1, 0)


def test_tokenizer_sha256_is_the_builders_and_tells_vocabularies_apart():
    from tokenizers import Tokenizer as Backend
    from tokenizers import models

    from specjax.tokenizer import Tokenizer
    from specjax.train import corpus

    def tok(vocab):
        return Tokenizer(Backend(models.WordLevel(vocab=vocab, unk_token="[UNK]")),
                         eos_ids=(0,))

    a = tok({"[UNK]": 0, "x": 1, "y": 2})
    assert tokenizer_sha256(a) == corpus.tokenizer_sha256(a)  # what manifests hold
    assert tokenizer_sha256(a) == tokenizer_sha256(tok({"[UNK]": 0, "x": 1, "y": 2}))
    assert tokenizer_sha256(a) != tokenizer_sha256(tok({"[UNK]": 0, "y": 1, "x": 2}))
    assert len(tokenizer_sha256(a)) == 64
    assert tokenizer_sha256(a.backend) == tokenizer_sha256(a)
    with pytest.raises(DataError, match="not a tokenizer"):
        tokenizer_sha256(object())


def test_split_and_batches_resume_exactly(corpus_dir):
    c = Corpus.open(corpus_dir)
    train, val = c.split(0.2, seed=5)
    assert len(train) + len(val) == len(c) and not set(train) & set(val) and len(val) >= 1
    t2, v2 = c.split(0.2, seed=5)
    assert np.array_equal(train, t2) and np.array_equal(val, v2)
    assert not np.array_equal(val, c.split(0.2, seed=6)[1])

    notes = []
    it = BatchIterator(c, train, 4, 16, seed=5, vocab_size=VOCAB, report=notes.append)
    first = [next(it) for _ in range(3)]
    pos = it.position
    rest = [next(it) for _ in range(12)]  # past the end of an epoch (38 records)
    b = first[0]
    assert b["tokens"].shape == (4, 16) and b["tokens"].dtype == np.int32
    assert b["loss_mask"].dtype == np.int32 and b["lengths"].shape == (4,)
    assert (b["lengths"] <= 16).all() and (b["loss_mask"].sum(1) <= b["lengths"]).all()
    # records longer than seq_len: reported once, all counted
    assert len(notes) == 1 and "truncated" in notes[0] and it.truncated > 1
    it2 = BatchIterator(c, train, 4, 16, seed=5, position=pos, report=notes.append)
    for want in rest:
        got = next(it2)
        assert all(np.array_equal(want[k], got[k]) for k in want)
    assert it2.position == it.position and it.position["epoch"] >= 1
    with pytest.raises(DataError, match="does not fit"):
        it2.set_position({"epoch": 0, "index": 10**6})
    ev = eval_batches(c, val, 4, 16, 2)
    assert 1 <= len(ev) <= 2 and all(e["lengths"].min() > 0 for e in ev)


# ----------------------------------------------------------------------------- training


def test_fit_learns_and_writes_metrics_curves_and_head(corpus_dir, lm, tmp_path):
    cfg = small_config(corpus_dir, tmp_path / "run", total_steps=25, eval_every=12,
                       log_every=5, plot=True)
    s = fit(cfg, lm=lm, progress=False)
    assert s["finished"] and s["step"] == 25 and s["steps_this_run"] == 25
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text()
             .splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    val = [x for x in lines if x["split"] == "val"]
    assert [x["step"] for x in train] == [5, 10, 15, 20, 25]
    assert [x["step"] for x in val] == [12, 24, 25]
    for x in train:
        assert set(x) >= {"step", "loss", "metrics", "lr", "tokens_per_s", "elapsed"}
        assert "acc_0" in x["metrics"]
    assert train[-1]["loss"] < 0.7 * train[0]["loss"]
    assert val[-1]["loss"] < val[0]["loss"]
    assert s["val_loss"] == val[-1]["loss"]
    assert (tmp_path / "run" / "curves.png").stat().st_size > 1000
    assert s["curves"] == str(tmp_path / "run" / "curves.png")
    meta = json.loads((tmp_path / "run" / "head" / "meta.json").read_text())
    assert meta["step"] == 25 and meta["target_config"]["vocab_size"] == VOCAB
    assert meta["train_config"]["lr"] == cfg.lr
    # a finished run, rerun: nothing to do
    again = fit(cfg, lm=lm, progress=False)
    assert again["finished"] and again["steps_this_run"] == 0 and again["resumed_from"] == 25

    # resuming under another config is refused, naming the fields
    with pytest.raises(ConfigError, match=r"lr: 0.03 -> 0.01.*seed: 5 -> 6"):
        fit(dataclasses.replace(cfg, lr=1e-2, seed=6), lm=lm, progress=False)

    # ... and so is resuming on a corpus that changed (the batches would differ)
    grown = write_corpus(tmp_path / "grown", counting_records(50), shards=2)
    with pytest.raises(DataError, match="corpus changed"):
        fit(dataclasses.replace(cfg, data=str(grown)), lm=lm, progress=False)

    # a damaged checkpoint is an error naming its directory
    ck = tmp_path / "run" / "checkpoints"
    latest = max(int(p.name) for p in ck.iterdir() if p.name.isdigit())
    for f in (ck / str(latest) / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as e:
        fit(cfg, lm=lm, progress=False)
    assert str(ck / str(latest)) in str(e.value)


def test_resume_is_bit_exact(corpus_dir, lm, tmp_path):
    """6 steps straight == 2 steps (max_steps_this_run) + SIGTERM at step 4 + the rest."""
    straight = fit(small_config(corpus_dir, tmp_path / "a"), lm=lm, progress=False)
    assert straight["finished"] and straight["stopped"] is None

    cfg = small_config(corpus_dir, tmp_path / "b")
    s1 = fit(dataclasses.replace(cfg, max_steps_this_run=2), lm=lm, progress=False)
    assert (s1["step"], s1["finished"], s1["stopped"]) == (2, False, "max_steps_this_run")

    def term_at_4(step):
        if step == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    s2 = fit(cfg, lm=lm, progress=False, on_step=term_at_4)
    assert (s2["step"], s2["stopped"], s2["resumed_from"]) == (4, "SIGTERM", 2)
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
    s3 = fit(cfg, lm=lm, progress=False)
    assert s3["finished"] and s3["step"] == 6 and s3["resumed_from"] == 4

    a, meta_a = leaves_of(tmp_path / "a")
    b, meta_b = leaves_of(tmp_path / "b")
    assert meta_a["step"] == meta_b["step"] == 6
    assert meta_a["data_position"] == meta_b["data_position"]
    for group in ("params", "opt_state", "rng"):
        assert len(a[group]) == len(b[group]) > 0
        for x, y in zip(a[group], b[group]):
            assert x.dtype == y.dtype and np.array_equal(x, y), group
    ha = np.load(tmp_path / "a" / "head" / "head.npz")
    hb = np.load(tmp_path / "b" / "head" / "head.npz")
    assert all(np.array_equal(ha[k], hb[k]) for k in ha.files)
    # the metrics of the chunked run are those of the straight one (same steps, same losses)
    la = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [(x["step"], x["split"], x["loss"]) for x in la] == [
        (x["step"], x["split"], x["loss"]) for x in lb]


def test_grad_accum(corpus_dir, lm, tmp_path):
    cfg = small_config(corpus_dir, tmp_path / "acc", grad_accum=2, total_steps=3,
                       max_steps_this_run=2)
    s = fit(cfg, lm=lm, progress=False)
    assert s["step"] == 2 and not s["finished"]
    s = fit(cfg, lm=lm, progress=False)
    assert s["finished"] and s["step"] == 3
    arrays, meta = leaves_of(tmp_path / "acc")
    # 3 steps of 2 micro-batches of 4 records each
    n_train = s["split"]["train"]
    assert meta["data_position"]["epoch"] * n_train + meta["data_position"]["index"] == 24
    # MultiSteps' state: mini_step back at 0, gradient_step == 3 (two scalar int leaves)
    ints = [x for x in arrays["opt_state"] if x.ndim == 0 and x.dtype.kind == "i"]
    assert 0 in ints and 3 in ints


# ----------------------------------------------------------------------------- CLI


def test_cli_train_lists_tasks(capsys):
    from specjax.cli import main

    assert main(["train", "NOPE"]) == 2
    err = capsys.readouterr().err
    assert "unknown training task 'NOPE'" in err and TOY in err


def test_cli_train_runs_a_config_on_a_checkpoint_with_a_tokenizer(tmp_path, capsys):
    """The whole path: a tiny GGUF with a tokenizer, its hash in the corpus manifest, a config
    file, the flags overriding it."""
    from gguf_fixtures import VOCAB_SIZE, write_gguf

    from specjax.cli import main
    from specjax.models.loaders import load
    from specjax.models.weights import model_to_tensors

    cfg = tiny_config(vocab_size=VOCAB_SIZE)
    gg = write_gguf(tmp_path / "tiny.gguf", cfg, model_to_tensors(random_model(cfg, seed=1)))
    sha = tokenizer_sha256(load(gg).tokenizer)
    data = write_corpus(tmp_path / "corpus", counting_records(12), sha=sha)
    other = write_corpus(tmp_path / "other", counting_records(12), sha="0" * 64)
    f = tmp_path / "train_toy.py"
    f.write_text(
        "from specjax.train import TrainConfig\n"
        "def get_config():\n"
        f"    return TrainConfig(task={TOY!r}, model={str(gg)!r}, data={str(other)!r},\n"
        f"        out_dir={str(tmp_path / 'unused')!r}, seq_len=16, batch_size=2,\n"
        "        total_steps=2, warmup_steps=0, eval_every=2, eval_batches=1, log_every=1)\n")
    argv = ["train", TOY, "--config", str(f), "--out-dir", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 2  # the config's corpus was written with another tokenizer
    assert "another tokenizer" in capsys.readouterr().err
    assert main(argv + ["--data", str(data), "--no-plot", "--max-steps-this-run", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step"] == 1 and not out["finished"]
    assert main(argv + ["--data", str(data), "--no-plot"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] and out["resumed_from"] == 1 and out["curves"] is None
    assert (tmp_path / "run" / "head" / "head.npz").exists()
    assert not (tmp_path / "unused").exists()
    # --set overrides any field (JSON values); a malformed one is an error naming it
    argv2 = ["train", TOY, "--config", str(f), "--out-dir", str(tmp_path / "run2"), "--quiet",
             "--data", str(data), "--no-plot", "--set", "total_steps=3", "--set", "lr=0.01"]
    assert main(argv2) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finished"] and out["step"] == 3
    meta = json.loads((tmp_path / "run2" / "head" / "meta.json").read_text())
    assert meta["train_config"]["lr"] == 0.01 and meta["finished"] is True
    assert main(argv2[:-2] + ["--set", "nope=1"]) == 2
    assert "no field 'nope'" in capsys.readouterr().err
    assert main(argv2[:-2] + ["--set", "lr"]) == 2
    assert "FIELD=VALUE" in capsys.readouterr().err


def test_time_limit_stops_with_a_checkpoint_and_the_head_so_far(corpus_dir, lm, tmp_path):
    cfg = small_config(corpus_dir, tmp_path / "t", time_limit_min=1e-9)
    s = fit(cfg, lm=lm, progress=False)
    assert (s["step"], s["finished"], s["stopped"]) == (1, False, "time_limit")
    meta = json.loads((tmp_path / "t" / "head" / "meta.json").read_text())
    assert meta["finished"] is False and meta["step"] == 1 and s["head"]
    # the limit is not part of the recipe: the same run goes on without it, to the end
    s2 = fit(dataclasses.replace(cfg, time_limit_min=None), lm=lm, progress=False)
    assert s2["finished"] and s2["resumed_from"] == 1 and s2["step"] == cfg.total_steps
    meta = json.loads((tmp_path / "t" / "head" / "meta.json").read_text())
    assert meta["finished"] is True and meta["step"] == cfg.total_steps
    for bad in (0, -1.0, float("inf"), "5"):
        with pytest.raises(ConfigError, match="time_limit_min"):
            small_config(corpus_dir, tmp_path / "x", time_limit_min=bad)


def test_init_from_starts_a_run_from_a_trained_head(corpus_dir, lm, tmp_path):
    """A finished EAGLE-3 run's head starts another run (on another corpus, whose own draft
    vocabulary would differ): the head's parameters and draft vocabulary are taken over;
    heads of another variant and tasks without warm_start are refused."""
    from specjax.heads.io import load_eagle_head

    args = {"ttt_steps": 1, "draft_vocab": 16}
    a = fit(small_config(corpus_dir, tmp_path / "a", task="eagle3", task_args=args,
                         total_steps=2), lm=lm, progress=False)
    head_a = Path(a["head"])
    # a corpus of other tokens: its most frequent 16 are not corpus_dir's
    other = write_corpus(tmp_path / "other", [
        {**r, "tokens": [(t * 7 + 3) % VOCAB for t in r["tokens"]]}
        for r in counting_records(40, seed=9, min_len=3, max_len=5)])
    cfg_b = small_config(other, tmp_path / "b", task="eagle3", task_args=args, total_steps=2,
                         lr=1e-9, warmup_steps=0, init_from=str(head_a))
    task = TASKS.build("eagle3", {**args, "corpus": str(other)}, lm)
    warm = task.warm_start(head_a)
    _, _, state_a, ids_a, _ = load_eagle_head(head_a, lm.model)
    assert not np.array_equal(np.asarray(task.frozen()["draft_ids"]), ids_a)
    np.testing.assert_array_equal(np.asarray(warm.frozen()["draft_ids"]), ids_a)
    for x, y in zip(jax.tree.leaves(warm.init_params(None)["head"]), jax.tree.leaves(state_a)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    b = fit(cfg_b, lm=lm, progress=False)
    _, _, state_b, ids_b, _ = load_eagle_head(b["head"], lm.model)
    np.testing.assert_array_equal(ids_b, ids_a)  # not the other corpus's vocabulary
    for x, y in zip(jax.tree.leaves(state_b), jax.tree.leaves(state_a)):  # lr ~ 0
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)

    with pytest.raises(ConfigError, match="other variant"):
        TASKS.build("eagle1", {**args, "corpus": str(other)}, lm).warm_start(head_a)
    with pytest.raises(ConfigError, match="cannot start from a trained head"):
        fit(small_config(corpus_dir, tmp_path / "c", init_from=str(head_a)), lm=lm,
            progress=False)


def test_revocab_moves_a_trained_head_onto_the_corpus_vocabulary(corpus_dir, lm, tmp_path):
    """revocab=true: the run's own draft vocabulary (of another size, from another corpus)
    replaces the head's; every parameter but the LM head carries over, a token in both
    vocabularies keeps its trained row, a new token gets the target's output row."""
    from specjax.heads.io import load_eagle_head

    a = fit(small_config(corpus_dir, tmp_path / "a", task="eagle3",
                         task_args={"ttt_steps": 1, "draft_vocab": 16}, total_steps=2),
            lm=lm, progress=False)
    _, _, state_a, ids_a, _ = load_eagle_head(a["head"], lm.model)
    other = write_corpus(tmp_path / "other", [
        {**r, "tokens": [(t * 7 + 3) % VOCAB for t in r["tokens"]]}
        for r in counting_records(40, seed=9, min_len=3, max_len=5)])
    args = {"ttt_steps": 1, "draft_vocab": 24, "corpus": str(other), "revocab": True}
    task = TASKS.build("eagle3", args, lm)
    warm = task.warm_start(a["head"])
    new_ids = np.asarray(warm.frozen()["draft_ids"])
    np.testing.assert_array_equal(new_ids, np.asarray(task.frozen()["draft_ids"]))
    assert len(new_ids) == 24 and "re-chosen" in warm.start_note
    shared = np.isin(new_ids, ids_a)
    assert shared.any() and not shared.all()  # the test sees both kinds of row
    head = warm.init_params(None)["head"]
    old = dict(jax.tree_util.tree_leaves_with_path(state_a))
    for path, x in jax.tree_util.tree_leaves_with_path(head):
        if "lm_head" not in jax.tree_util.keystr(path):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(old[path]))
    rows = np.asarray(head["lm_head"][...])
    old_rows = np.asarray(state_a["lm_head"][...])
    where = {int(t): i for i, t in enumerate(ids_a)}
    out = np.asarray(lm.model.embed[...] if lm.model.lm_head is None else lm.model.lm_head[...])
    for j, t in enumerate(new_ids):
        want = old_rows[where[int(t)]] if int(t) in where else out[t]
        np.testing.assert_array_equal(rows[j], want.astype(np.float32))
    # the run trains and saves a head of the new vocabulary
    b = fit(small_config(other, tmp_path / "b", task="eagle3", task_args=args, total_steps=2,
                         init_from=a["head"]), lm=lm, progress=False)
    _, _, _, ids_b, _ = load_eagle_head(b["head"], lm.model)
    np.testing.assert_array_equal(ids_b, new_ids)
    with pytest.raises(ConfigError, match="revocab"):
        TASKS.build("eagle3", {**args, "revocab": "maybe"}, lm)
