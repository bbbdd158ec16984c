"""Verify-cost curves measured on first use and cached per device, model and batch bucket
(specjax.cost_curves): hit, miss, refresh, built-in, and stale or corrupt files."""

import json

import pytest

from specjax import methods
from specjax.config import tiny_config
from specjax.errors import PolicyError
from specjax.models.loaders import LoadedModel, random_model
from specjax import cost_curves as cc
from specjax.policies.adaptive import default_cost


@pytest.fixture(scope="module")
def lm():
    cfg = tiny_config(vocab_size=64)
    return LoadedModel(random_model(cfg, seed=0), None, cfg, "random:tiny", "random")


@pytest.fixture(autouse=True)
def auto_mode(monkeypatch):
    monkeypatch.setenv(cc.MODE_ENV, "auto")  # the suite's default is "builtin" (conftest)
    monkeypatch.delenv(cc.AGE_ENV, raising=False)


class FakeProbe:
    """Stands in for verify_curve: seconds grow linearly with k, counts its calls."""

    def __init__(self, slope=0.25):
        self.calls, self.slope = [], slope

    def __call__(self, lm, *, ks, batches, prefix, repeats):
        self.calls.append(tuple(ks))
        secs = [1.0 + self.slope * (k - 1) for k in ks]
        return {"ks": list(ks), "batches": list(batches), "prefix": prefix,
                "seconds": {str(b): secs for b in batches},
                "relative": {str(b): [s / secs[0] for s in secs] for b in batches}}


def test_miss_measures_and_caches_then_hits(lm, tmp_path):
    probe = FakeProbe()
    curve = cc.measured_cost(lm, 8, 1, mode="auto", directory=tmp_path, measure=probe,
                             say=lambda s: None)
    assert probe.calls == [(1, 2, 4, 8, 9)]  # the engine's verify block sizes for k = 8
    # T = 1..9, interpolated between the measured block sizes: 1 + 0.25 (T - 1)
    assert curve == pytest.approx([1 + 0.25 * (T - 1) for T in range(1, 10)])
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["key"]["batch"] == 1
    again = cc.measured_cost(lm, 8, 1, mode="auto", directory=tmp_path, measure=probe)
    assert again == curve and len(probe.calls) == 1  # a hit: nothing measured
    # a smaller k whose blocks were measured reads the same file (k = 7: 1, 2, 4, 8)
    assert cc.measured_cost(lm, 7, 1, directory=tmp_path, measure=probe) == curve[:8]
    assert cc.measured_cost(lm, 1, 1, directory=tmp_path, measure=probe) == curve[:2]
    assert len(probe.calls) == 1
    # k = 4 verifies a 5-token block, never measured: measured with the file's sizes, kept
    with pytest.warns(cc.CostCurveWarning, match=r"no measured block size 5 \(has 1, 2, 4, "
                                                 r"8, 9\)"):
        assert cc.measured_cost(lm, 4, 1, directory=tmp_path, measure=probe,
                                say=lambda s: None) == curve[:5]
    assert probe.calls[-1] == (1, 2, 4, 5, 8, 9)
    assert cc.measured_cost(lm, 8, 1, directory=tmp_path, measure=probe) == curve
    assert len(probe.calls) == 2
    # batch 3 is in bucket 4: another file, measured
    cc.measured_cost(lm, 8, 3, directory=tmp_path, measure=probe, say=lambda s: None)
    assert len(probe.calls) == 3 and len(list(tmp_path.glob("*.json"))) == 2
    # refresh measures again and replaces the file
    cc.measured_cost(lm, 8, 1, mode="refresh", directory=tmp_path, measure=FakeProbe(0.5),
                     say=lambda s: None)
    assert cc.measured_cost(lm, 8, 1, directory=tmp_path, measure=probe)[1] == 1.5


def test_stale_and_corrupt_files_are_measured_again(lm, tmp_path):
    probe = FakeProbe()
    kw = dict(directory=tmp_path, measure=probe, say=lambda s: None)
    cc.measured_cost(lm, 4, 1, **kw)
    (path,) = tmp_path.glob("*.json")
    # a larger k needs block sizes the file lacks
    with pytest.warns(cc.CostCurveWarning, match=r"no measured block size 8, 9 \(has 1, 2, "
                                                 r"4, 5\)"):
        cc.measured_cost(lm, 8, 1, **kw)
    assert probe.calls[-1] == (1, 2, 4, 5, 8, 9)
    path.write_text("{not json")
    with pytest.warns(cc.CostCurveWarning, match="is corrupt"):
        cc.measured_cost(lm, 8, 1, **kw)
    data = json.loads(path.read_text())
    data["key"]["device"] = "another machine"
    path.write_text(json.dumps(data))
    with pytest.warns(cc.CostCurveWarning, match="another device or model"):
        cc.measured_cost(lm, 8, 1, **kw)
    data = json.loads(path.read_text())
    data["relative"]["1"][2] = -1.0
    path.write_text(json.dumps(data))
    with pytest.warns(cc.CostCurveWarning, match="is corrupt"):
        cc.measured_cost(lm, 8, 1, **kw)
    assert len(probe.calls) == 5


def _age(path, hours):
    """Rewrites the file's ``measured_at`` as ``hours`` ago."""
    import datetime

    data = json.loads(path.read_text())
    when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=hours)
    data["measured_at"] = when.isoformat(timespec="seconds")
    path.write_text(json.dumps(data))


def test_max_age_measures_an_old_curve_again(lm, tmp_path, monkeypatch):
    """Under $SPECJAX_COST_MAX_AGE a curve older than that is measured again (with the sizes
    it had), without a warning, and the notice says why; unset, an old curve stands."""
    probe, said = FakeProbe(), []
    kw = dict(directory=tmp_path, measure=probe, say=said.append)
    cc.measured_cost(lm, 8, 1, **kw)
    (path,) = tmp_path.glob("*.json")
    _age(path, 30.0)
    cc.measured_cost(lm, 8, 1, **kw)
    assert len(probe.calls) == 1  # no max age: a hit, however old
    monkeypatch.setenv(cc.AGE_ENV, "48")
    cc.measured_cost(lm, 8, 1, **kw)
    assert len(probe.calls) == 1  # 30 h < 48 h
    monkeypatch.setenv(cc.AGE_ENV, "6")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cc.measured_cost(lm, 2, 1, **kw)
    assert probe.calls[-1] == (1, 2, 3, 4, 8, 9)  # its sizes and k = 2's
    assert "measured 30.0 h ago ($SPECJAX_COST_MAX_AGE=6 h)" in said[-1]
    cc.measured_cost(lm, 8, 1, **kw)
    assert len(probe.calls) == 2  # measured just now: a hit
    data = json.loads(path.read_text())
    del data["measured_at"]
    path.write_text(json.dumps(data))
    cc.measured_cost(lm, 8, 1, **kw)
    assert len(probe.calls) == 3 and "says not when it was measured" in said[-1]
    for bad in ("soon", "0", "-1", "inf"):
        monkeypatch.setenv(cc.AGE_ENV, bad)
        with pytest.raises(PolicyError, match=r"SPECJAX_COST_MAX_AGE=.*number of hours > 0"):
            cc.measured_cost(lm, 8, 1, **kw)


def test_builtin_mode_and_bad_settings(lm, tmp_path, monkeypatch):
    probe = FakeProbe()
    assert cc.measured_cost(lm, 8, 1, mode="builtin", directory=tmp_path,
                            measure=probe) == default_cost(lm)
    monkeypatch.setenv(cc.MODE_ENV, "builtin")
    assert cc.measured_cost(lm, 8, 1, directory=tmp_path, measure=probe) == default_cost(lm)
    assert probe.calls == [] and not list(tmp_path.iterdir())
    monkeypatch.setenv(cc.MODE_ENV, "sometimes")
    with pytest.raises(PolicyError, match=r"\$SPECJAX_COST_CURVE='sometimes'.*auto, builtin"):
        cc.measured_cost(lm, 8, 1, directory=tmp_path, measure=probe)
    with pytest.raises(PolicyError, match="batch size of a cost curve"):
        cc.measured_cost(lm, 8, 0, mode="auto", directory=tmp_path, measure=probe)
    # an unwritable cache: a warning, and the measured curve all the same
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(cc.CostCurveWarning, match="could not cache it"):
        curve = cc.measured_cost(lm, 2, 1, mode="auto", directory=blocker / "sub",
                                 measure=probe, say=lambda s: None)
    assert curve == pytest.approx([1.0, 1.25, 1.5])


def test_methods_build_measures_with_the_real_probe(lm, tmp_path, monkeypatch):
    """The adaptive policy built by specjax.methods gets this machine's curve (a real, short
    measurement on the tiny model), cached in SPECJAX_CACHE_DIR; cost=builtin opts out."""
    monkeypatch.setenv(cc.MODE_ENV, "auto")
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    m = methods.build("prompt_lookup", lm, {"k": "4", "policy": "adaptive"}, batch=1)
    (path,) = (tmp_path / "cost_curves").glob("*.json")
    data = json.loads(path.read_text())
    assert data["ks"] == [1, 2, 4, 5] and data["key"]["device"] == cc.device_description()
    assert len(m.policy.cost) == 5 and m.policy.cost[0] == 1.0
    assert all(c > 0 for c in m.policy.cost)
    b = methods.build("prompt_lookup", lm, {"k": "4", "policy": "adaptive",
                                            "cost": "builtin"})
    assert b.policy.cost == default_cost(lm)


def test_in_loop_curve_is_cached_apart(lm, tmp_path):
    """``in_loop=True``: its own file (the key names the probe), its own probe's repeats."""
    lone, loop = FakeProbe(0.25), FakeProbe(0.5)
    seen = []

    def loop_probe(lm, *, ks, batches, prefix, repeats, cache_len):
        seen.append(repeats)
        return loop(lm, ks=ks, batches=batches, prefix=prefix, repeats=repeats)

    a = cc.measured_cost(lm, 4, 4, directory=tmp_path, measure=lone, say=lambda s: None)
    b = cc.measured_cost(lm, 4, 4, directory=tmp_path, measure=loop_probe, say=lambda s: None,
                         in_loop=True)
    assert a[1] == 1.25 and b[1] == 1.5 and seen == [cc.IN_LOOP_REPEATS]
    keys = sorted(json.dumps(json.loads(f.read_text())["key"].get("probe"))
                  for f in tmp_path.glob("*.json"))
    assert keys == [f'"{cc.LOOP_PROBE}"', "null"]
    # each a hit afterwards
    assert cc.measured_cost(lm, 4, 4, directory=tmp_path, measure=lone) == a
    assert cc.measured_cost(lm, 4, 4, directory=tmp_path, measure=loop_probe,
                            in_loop=True) == b
    assert len(lone.calls) == 1 and len(loop.calls) == 1


def test_in_loop_curve_is_timed_and_cached_per_cache_length(lm, tmp_path):
    """The in-loop probe times the generation's cache length (bucketed: 896 -> 1,024) and
    each length has its own file; the lone-forward curve has no cache length in its key."""
    loop, seen = FakeProbe(0.5), []

    def loop_probe(lm, *, ks, batches, prefix, repeats, cache_len):
        seen.append(cache_len)
        return loop(lm, ks=ks, batches=batches, prefix=prefix, repeats=repeats)

    kw = dict(directory=tmp_path, measure=loop_probe, say=lambda s: None, in_loop=True)
    cc.measured_cost(lm, 4, 4, **kw)
    cc.measured_cost(lm, 4, 4, cache_len=896, **kw)
    cc.measured_cost(lm, 4, 4, cache_len=1024, **kw)  # a hit
    cc.measured_cost(lm, 4, 4, cache_len=300, **kw)  # a hit: 256
    assert seen == [256, 1024]
    assert sorted(json.loads(f.read_text())["key"]["cache_len"]
                  for f in tmp_path.glob("*.json")) == [256, 1024]
    # the lone-forward probe takes no cache length (FakeProbe would refuse one)
    lone = FakeProbe(0.25)
    cc.measured_cost(lm, 4, 4, directory=tmp_path, measure=lone, say=lambda s: None,
                     cache_len=896)
    assert len(lone.calls) == 1
    assert sorted(str(json.loads(f.read_text())["key"].get("cache_len"))
                  for f in tmp_path.glob("*.json")) == ["1024", "256", "None"]


def test_methods_build_prices_at_the_cache_length_it_is_given(lm, tmp_path, monkeypatch):
    """methods.build(cache_len=) reaches both probes: the step costs of a model-based drafter
    and, above batch 1, the in-loop curve of a model-free one."""
    from specjax import cost_curves, draft_costs

    got = []
    monkeypatch.setattr(cost_curves, "measured_cost",
                        lambda lm, k, b, **kw: got.append(("curve", b, kw.get("cache_len")))
                        or default_cost(lm))
    def steps(lm, d, name, a, **kw):  # as the real one: nothing for a model-free drafter
        got.append(("steps", kw["batch"], kw["cache_len"]))
        return None if getattr(d, "model_free", False) else (1.0,) + (1.2,) * d.max_k

    monkeypatch.setattr(draft_costs, "measured_step_costs", steps)
    methods.build("prompt_lookup", lm, {"k": "4"}, batch=4, cache_len=896)
    methods.build("early_exit", lm, {"k": "2", "exit_layer": "1"}, batch=4, cache_len=512)
    assert ("curve", 4, 896) in got and ("steps", 4, 512) in got
    got.clear()  # a drafter that weighs its blocks itself (ngram's cost=) gets it too
    methods.build("ngram", lm, {"k": "4"}, batch=4, cache_len=2000)
    assert got and all(c == 2000 for _, _, c in got)


def test_methods_above_batch_1_price_by_loop_steps_against_plain(lm, tmp_path, monkeypatch):
    """Above batch 1 a model-free method's curve is the in-loop probe's (a real, short
    measurement on the tiny model): whole loop steps with junk drafts against plain steps,
    1 for the idle step."""
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    m = methods.build("prompt_lookup", lm, {"k": "4", "policy": "adaptive"}, batch=2)
    (path,) = (tmp_path / "cost_curves").glob("*.json")
    data = json.loads(path.read_text())
    assert data["key"]["probe"] == cc.LOOP_PROBE and data["key"]["batch"] == 4
    assert data["against"] == "plain" and data["ks"] == [1, 2, 4, 5]
    assert len(data["seconds"]["4"]) == 4 and all(s > 0 for s in data["seconds"]["4"])
    assert m.policy.cost[0] == 1.0 and len(m.policy.cost) == 5
    assert all(c > 0 for c in m.policy.cost)
