"""A head's measured first-token acceptance, recorded in its config.json
(specjax.heads.measured, `specjax head record-acceptance`)."""

import json
from pathlib import Path

import pytest

from specjax.cli import main
from specjax.errors import CheckpointError
from specjax.heads import measured
from specjax.heads.shipped import ROOT

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def journal(path, label="medusa@chain", temperature=0.0, tree=None, runs=(), head="h"):
    """A bench journal: a header and one line of ``runs`` as (drafted_at, accepted_at)."""
    conf = {"method": "medusa", "description": f"medusa heads /somewhere/{head} (step 3)"}
    if tree:
        conf["tree"] = tree
    lines = [{"header": {"temperature": temperature, "batch_size": 1, "prompts": "p.jsonl",
                         "n_prompts": len(runs), "method_args": {label: {"k": "3"}},
                         "configs": {"ar": {"method": "ar"}, label: conf}}},
             {"group": "g", "runs": [{"method": "ar", "drafted_at": None}] + [
                 {"method": label, "drafted_at": d, "accepted_at": a} for d, a in runs]}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def head_dir(path, extra=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"format": "specjax-medusa-1",
                                                  "meta": {"step": 3}, **(extra or {})}))
    return path


def test_counts_first_tokens_and_records_one_per_temperature(tmp_path):
    j = journal(tmp_path / "j.jsonl", runs=[([10, 5, 5], [4, 1, 0]), ([6, 2], [2, 1]),
                                            (None, None)])
    rec = measured.count_journal(j, "medusa@chain")
    assert (rec.temperature, rec.accepted, rec.drafted, rec.rate) == (0.0, 6, 16, 6 / 16)
    assert rec.method_args == {"k": "3"} and rec.source == "j.jsonl"
    h = head_dir(tmp_path / "h")
    measured.record(h, rec)
    hot = measured.count_journal(journal(tmp_path / "k.jsonl", temperature=0.7,
                                         runs=[([8], [2])]), "medusa@chain")
    measured.record(h, hot)
    again = measured.AcceptanceRecord(0.0, 3, 4)
    measured.record(h, again)  # replaces the greedy record, keeps the sampled one
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
    with pytest.raises(CheckpointError, match="drafted a tree"):
        measured.count_journal(j, "medusa@chain")
    with pytest.raises(CheckpointError, match="no method 'hydra'; it holds ar, medusa@chain"):
        measured.count_journal(j, "hydra")
    idle = journal(tmp_path / "i.jsonl", runs=[([0, 0], [0, 0])])
    with pytest.raises(CheckpointError, match="drafted no token"):
        measured.count_journal(idle, "medusa@chain")
    (tmp_path / "x.jsonl").write_text('{"group": 1}\n')
    with pytest.raises(CheckpointError, match="no header line"):
        measured.count_journal(tmp_path / "x.jsonl", "medusa@chain")
    (tmp_path / "y.jsonl").write_text("{not json\n")
    with pytest.raises(CheckpointError, match="not a readable bench journal"):
        measured.count_journal(tmp_path / "y.jsonl", "medusa@chain")
    for recs, msg in (({"a": 1}, "must be a list"),
                      ([{"temperature": 0.0, "accepted": 3}], r"\[0\] lacks drafted"),
                      ([{"temperature": 0.0, "accepted": 5, "drafted": 4}],
                       "0 <= accepted <= drafted"),
                      ([{"temperature": -1, "accepted": 1, "drafted": 4}], "temperature >= 0"),
                      ([{"temperature": "hot", "accepted": 1, "drafted": 4}], "hot"),
                      (["x"], "must be an object")):
        h = head_dir(tmp_path / "bad", {measured.KEY: recs})
        with pytest.raises(CheckpointError, match=msg) as e:
            measured.acceptance_for(h, 0.0)
        assert "config.json" in str(e.value)
        with pytest.raises(CheckpointError):  # nothing is written over a malformed file
            measured.record(h, measured.AcceptanceRecord(0.0, 1, 2))
        assert json.loads((h / "config.json").read_text())[measured.KEY] == recs


def test_record_acceptance_command(tmp_path, capsys):
    h = head_dir(tmp_path / "h")
    j = journal(tmp_path / "j.jsonl", runs=[([10], [4])])
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                 "--head", str(h), "--dry-run"]) == 0
    assert "accepted 4 of 10 (0.400)" in capsys.readouterr().out
    assert measured.KEY not in json.loads((h / "config.json").read_text())
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                 "--head", str(h)]) == 0
    assert measured.acceptance_for(h, 0.0).rate == 0.4
    other = head_dir(tmp_path / "h2")
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@chain",
                 "--head", str(other)]) == 2  # the journal's method loaded another head
    assert "not the head in" in capsys.readouterr().err
    assert measured.KEY not in json.loads((other / "config.json").read_text())
    assert main(["head", "record-acceptance", str(j), "--method", "medusa@tree",
                 "--head", str(h)]) == 2
    assert "no method 'medusa@tree'" in capsys.readouterr().err


@pytest.mark.parametrize("name,label,journal_name,temperature", [
    ("medusa", "medusa", "spec_bench_heads_mh_default", 0.0),
    ("medusa", "medusa@chain", "spec_bench_medusa_tree3_sampling", 0.7),
    ("hydra", "hydra", "spec_bench_heads_mh_default", 0.0),
])
def test_shipped_records_match_their_journals(name, label, journal_name, temperature):
    """Each record shipped in a head file counts what its recorded journal holds."""
    j = RESULTS / f"{journal_name}.journal.jsonl"
    if not j.is_file():
        pytest.skip(f"{j} not in this checkout")
    head = ROOT / f"smollm2-135m-{name}"
    rec = measured.acceptance_for(head, temperature)
    assert rec is not None and rec.source == j.name and rec.method == label
    assert rec == measured.count_journal(j, label)
