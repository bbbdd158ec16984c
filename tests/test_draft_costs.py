"""What a speculative step costs, measured in the decode loop (specjax.draft_costs): the step
costs from the timed steps, the cache (hit, miss, refresh, built-in, corrupt or foreign files),
model-free drafters, the cost-aware policies counting them, and methods.build filling them in."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import cost_curves as cc
from specjax import draft_costs as dc
from specjax import methods
from specjax.config import tiny_config
from specjax.errors import PolicyError
from specjax.models.loaders import LoadedModel, random_model
from specjax.policies.adaptive import AdaptivePolicy, AdaptiveState


@pytest.fixture(scope="module")
def lm():
    cfg = tiny_config(vocab_size=64)
    return LoadedModel(random_model(cfg, seed=0), None, cfg, "random:tiny", "random")


@pytest.fixture(autouse=True)
def auto_mode(monkeypatch, tmp_path):
    monkeypatch.setenv(cc.MODE_ENV, "auto")  # the suite's default is "builtin" (conftest)
    monkeypatch.setenv("SPECJAX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(cc.AGE_ENV, raising=False)


def flat_curve(lm, *, ks, batches, prefix, repeats):
    """A verify curve where every block costs 1.5 plain forwards (above one token)."""
    rel = [1.0] + [1.5] * (len(ks) - 1)
    return {"ks": list(ks), "batches": list(batches), "prefix": prefix,
            "seconds": {str(b): rel for b in batches}, "relative": {str(b): rel for b in batches}}


class FakeSteps:
    """Stands in for measure_step_ratio: a step of the drafter drafting k tokens costs
    ``ratios[k]`` plain steps (k = 1 and max_k for the drafters here)."""

    def __init__(self, ratios):
        self.ratios, self.calls = dict(ratios), []

    def __call__(self, lm, drafter, batch, cache_len=256):
        self.calls.append((drafter.max_k, batch) if cache_len == 256
                          else (drafter.max_k, batch, cache_len))
        return {"plain_step_s": 0.1, "k": drafter.max_k, "batch": batch,
                "step_s": {str(k): 0.1 * r for k, r in self.ratios.items()}}


class Drafter:
    def __init__(self, max_k, model_free=False):
        self.max_k, self.model_free = max_k, model_free


def test_step_costs_by_hand():
    # timed: the largest draft of each verify block (blocks 2, 4, ..., max_k + 1)
    assert dc.timed_ks(1) == (1,) and dc.timed_ks(3) == (1, 3) and dc.timed_ks(6) == (1, 3, 6)
    assert dc.timed_ks(8) == (1, 3, 7, 8)
    # k = 2 drafts into k = 3's 4-token block: its cost; k = 0 is a plain step
    assert dc.step_costs_from({1: 1.1, 3: 1.2}, 3) == (1.0, 1.1, 1.2, 1.2)
    assert dc.step_costs_from({1: 1.1, 3: 1.3, 6: 1.5}, 6) == (1.0, 1.1, 1.3, 1.3, 1.5, 1.5,
                                                              1.5)
    # noise never makes a longer draft cheaper
    assert dc.step_costs_from({1: 1.3, 3: 1.2}, 3) == (1.0, 1.3, 1.3, 1.3)
    with pytest.raises(PolicyError, match=r"k = \[3\]"):
        dc.step_costs_from({1: 1.1}, 3)
    with pytest.raises(PolicyError, match="positive"):
        dc.step_costs_from({1: 1.1, 3: 0.0}, 3)


def test_measures_caches_hits_and_refreshes(lm, tmp_path):
    steps = FakeSteps({1: 1.9, 3: 2.4})
    kw = dict(directory=tmp_path, measure=steps, say=lambda s: None)
    got = dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, batch=1, **kw)
    assert got == pytest.approx((1.0, 1.9, 2.4, 2.4)) and steps.calls == [(3, 1)]
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert data["key"]["drafter"] == "early_exit" and data["key"]["batch"] == 1
    assert data["step_ratio"] == {"1": 1.9, "3": 2.4} and data["step_cost"] == list(got)
    # a hit: nothing measured
    assert dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw) == got
    assert len(steps.calls) == 1
    # other options, another k or another batch bucket: measured again, another file
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3", "exit_layer": "1"}, **kw)
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, batch=3, **kw)
    assert steps.calls[1:] == [(3, 1), (3, 4)] and len(list(tmp_path.glob("*.json"))) == 3
    # refresh measures again and replaces the file
    again = dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, mode="refresh",
                                   **{**kw, "measure": FakeSteps({1: 1.5, 3: 3.0})})
    assert again == pytest.approx((1.0, 1.5, 3.0, 3.0))
    assert dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw) == again


def test_step_costs_are_timed_and_cached_per_cache_length(lm, tmp_path):
    # the nearest of 256, 512, 1024, ... in log scale; unknown: 256
    assert dc.probe_cache_length(None) == 256 and dc.probe_cache_length(64) == 256
    assert [dc.probe_cache_length(n) for n in (320, 384, 704, 896, 1024, 1600)] == \
        [256, 512, 512, 1024, 1024, 2048]
    with pytest.raises(PolicyError, match="cache length"):
        dc.probe_cache_length(0)
    from specjax.buckets import median_cache_length

    # the lower median prompt's cache: prompts of 10, 300, 900 tokens and 64 new ones
    assert median_cache_length([900, 10, 300], 64) == 576 and median_cache_length([], 64) is None
    assert median_cache_length([10, 900], 64) == 128
    steps = FakeSteps({1: 1.3, 3: 1.8})
    kw = dict(directory=tmp_path, measure=steps, say=lambda s: None)
    short = dc.measured_step_costs(lm, Drafter(3), "eagle", {}, batch=4, **kw)
    long = dc.measured_step_costs(lm, Drafter(3), "eagle", {}, batch=4, cache_len=896,
                                  **{**kw, "measure": steps})
    assert short == long and steps.calls == [(3, 4), (3, 4, 1024)]
    keys = sorted(json.loads(p.read_text())["key"]["cache_len"] for p in tmp_path.glob("*"))
    assert keys == [256, 1024]
    # the same bucket is a hit: 1,000 positions are priced by the 1,024-position probe
    dc.measured_step_costs(lm, Drafter(3), "eagle", {}, batch=4, cache_len=1000, **kw)
    dc.measured_step_costs(lm, Drafter(3), "eagle", {}, batch=4, **kw)
    assert len(steps.calls) == 2


def test_the_probe_times_the_cache_length_it_is_given(lm, monkeypatch):
    import specjax.bench.curve as curve

    seen = []

    def fake(lm_, runs, prompt, batch, budgets, cache_len, repeats):
        seen.append(cache_len)
        return [[1.0] * repeats for _ in runs]

    monkeypatch.setattr(curve, "interleaved_seconds_per_forward", fake)
    got = dc.measure_step_ratio(lm, Drafter(1), 1, cache_len=1024, repeats=2)
    dc.measure_step_ratio(lm, Drafter(1), 1, repeats=2)
    assert seen == [1024, 256] and got["cache_len"] == 1024 and got["ratio"] == {"1": 1.0}


def test_max_age_measures_old_step_costs_again(lm, tmp_path, monkeypatch):
    import datetime

    steps, said = FakeSteps({1: 1.9, 3: 2.4}), []
    kw = dict(directory=tmp_path, measure=steps, say=said.append)
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw)
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=10)
    path.write_text(json.dumps({**data, "measured_at": old.isoformat()}))
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw)
    assert len(steps.calls) == 1  # no max age: an old file stands
    monkeypatch.setenv(cc.AGE_ENV, "12")
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw)
    assert len(steps.calls) == 1
    monkeypatch.setenv(cc.AGE_ENV, "2.5")
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw)
    assert len(steps.calls) == 2 and "measured 10.0 h ago" in said[-1]
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw)
    assert len(steps.calls) == 2  # fresh again
    monkeypatch.setenv(cc.AGE_ENV, "a day")
    with pytest.raises(PolicyError, match="SPECJAX_COST_MAX_AGE"):
        dc.measured_step_costs(lm, Drafter(3), "early_exit", {"k": "3"}, **kw)


def test_builtin_and_model_free_measure_nothing(lm, tmp_path):
    steps = FakeSteps({1: 1.9, 3: 2.4})
    kw = dict(directory=tmp_path, measure=steps, say=lambda s: None)
    assert dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, mode="builtin",
                                  **kw) is None
    assert dc.measured_step_costs(lm, Drafter(8, model_free=True), "prompt_lookup", {},
                                  **kw) is None
    assert steps.calls == [] and not list(tmp_path.glob("*.json"))
    with pytest.raises(PolicyError, match="cost-curve mode"):
        dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, mode="sometimes", **kw)


def test_corrupt_foreign_or_bad_files_are_measured_again(lm, tmp_path):
    steps = FakeSteps({1: 1.9, 3: 2.4})
    kw = dict(directory=tmp_path, measure=steps, say=lambda s: None)
    dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, **kw)
    (path,) = tmp_path.glob("*.json")
    good = path.read_text()
    path.write_text("{not json")
    with pytest.warns(dc.DraftCostWarning, match="cannot be used"):
        dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, **kw)
    data = json.loads(good)
    data["key"]["device"] = "another machine"
    path.write_text(json.dumps(data))
    with pytest.warns(dc.DraftCostWarning, match="another device"):
        dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, **kw)
    # a file with the step costs of another k, decreasing or infinite ones, or none
    data = json.loads(good)
    for bad in ([1.0, 1.9, 1.2, 1.2], [1.0, 1.9, float("inf"), float("inf")]):
        data["step_cost"] = bad
        path.write_text(json.dumps(data))
        with pytest.warns(dc.DraftCostWarning, match="never decreasing"):
            dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, **kw)
    data["step_cost"] = [1.0, 1.9]
    path.write_text(json.dumps(data))
    with pytest.warns(dc.DraftCostWarning, match="not 4 finite positive costs"):
        dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, **kw)
    data.pop("step_cost")
    path.write_text(json.dumps(data))
    with pytest.warns(dc.DraftCostWarning, match="KeyError"):
        dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, **kw)
    assert len(steps.calls) == 7


def test_paired_ratios_are_taken_over_the_medians(lm, tmp_path):
    """A probe that reports the median of paired per-round ratios (measure_step_ratio does)
    is priced by those, not by the ratio of the median times."""
    def probe(lm, drafter, batch, cache_len):
        return {"plain_step_s": 0.1, "step_s": {"1": 0.2, "3": 0.3},
                "ratio": {"1": 1.1, "3": 1.25}}

    got = dc.measured_step_costs(lm, Drafter(3), "early_exit", {}, directory=tmp_path,
                                 measure=probe, say=lambda s: None)
    assert got == pytest.approx((1.0, 1.1, 1.25, 1.25))


def test_parse_draft_cost():
    assert dc.parse_draft_cost("0.25") == 0.25 and dc.parse_draft_cost(" Auto ") == "auto"
    for bad in ("-1", "cheap", None):
        with pytest.raises(PolicyError, match="draft_cost"):
            dc.parse_draft_cost(bad)


def test_adaptive_and_smartspec_with_measured_step_costs():
    from specjax.policies.smartspec import SmartSpecPolicy

    # a = 0.5: tokens(k) = 1, 1.5, 1.75, 1.875; steps cost 1, 1.1, 1.2, 1.2: gains 1, 1.364,
    # 1.458, 1.5625: k = 3. The verify curve and draft costs given beside are not used.
    state = AdaptiveState(accepted=jnp.asarray([2.0, 0.0]), rejected=jnp.asarray([2.0, 30.0]))
    pol = AdaptivePolicy(max_k=3, step_cost=(1.0, 1.1, 1.2, 1.2), cost=(1.0, 9.0, 9.0, 9.0),
                         draft_cost=5.0)
    np.testing.assert_allclose(np.asarray(pol.expected_gain(state))[0],
                               [1.0, 1.5 / 1.1, 1.75 / 1.2, 1.875 / 1.2], rtol=1e-6)
    # the second row (a = 1 / 32: tokens 1.031 for a 1.1 step) drafts nothing
    assert np.asarray(pol.decide(state, None)).tolist() == [3, 0]
    assert pol.never_drafts() is None
    # the same costs from the verify curve and a clamped draft cost (what format 3 gave the
    # EAGLE-3 head: verify 0.875 / 1.209, overhead 0.236): k = 3 priced at 1.445, so k = 1
    split = AdaptivePolicy(max_k=3, cost=(1.0, 0.875, 1.042, 1.209), draft_overhead=0.236)
    assert np.asarray(split.decide(state, None)).tolist() == [1, 0]
    ss = SmartSpecPolicy(max_k=3, step_cost=(1.0, 1.1, 1.2, 1.2), prior=0.5)
    np.testing.assert_allclose(np.asarray(ss.step_costs()), [1.0, 1.1, 1.2, 1.2])
    assert np.asarray(ss.decide(ss.init(1), None)).tolist() == [3]
    # expensive steps: nothing pays at the prior, and the reason says the costs were measured
    dear = AdaptivePolicy(max_k=3, step_cost=(1.0, 1.6, 2.0, 2.0))
    why = dear.never_drafts()
    assert why is not None and "measured in the decode loop" in why
    for bad in ((1.0, 1.1), (1.0, 1.1, 0.0, 1.2), (1.1, 1.1, 1.2, 1.2)):
        with pytest.raises(PolicyError, match="step_cost needs max_k \\+ 1 = 4"):
            AdaptivePolicy(max_k=3, step_cost=bad)
        with pytest.raises(PolicyError, match="step_cost"):
            SmartSpecPolicy(max_k=3, step_cost=bad)


def test_adaptive_counts_the_overhead_of_drafting_at_all():
    state = AdaptiveState(accepted=jnp.asarray([2.0]), rejected=jnp.asarray([2.0]))  # a = 0.5
    cost = (1.0,) * 16
    # tokens(k) = 2 (1 - 0.5^(k+1)) = 1, 1.5, 1.75, 1.875, 1.9375; with o = 0.4 a drafting
    # step costs 1.4 + 0.1 k: gains 1, 1.0, 1.094, 1.103, 1.076, so k = 3
    pol = AdaptivePolicy(max_k=4, cost=cost, draft_cost=0.1, draft_overhead=0.4)
    gain = np.asarray(pol.expected_gain(state))[0]
    want = [1.0] + [2 * (1 - 0.5 ** (k + 1)) / (1.4 + 0.1 * k) for k in range(1, 5)]
    np.testing.assert_allclose(gain, want, rtol=1e-6)
    assert np.asarray(pol.decide(state, None)).tolist() == [3]
    # without o: 1.364, 1.458, 1.442, 1.384, so k = 2; with o = 1 every k >= 1 loses to the
    # idle step (1.5 / 2.1 at best)
    assert np.asarray(AdaptivePolicy(max_k=4, cost=cost, draft_cost=0.1)
                      .decide(state, None)).tolist() == [2]
    assert np.asarray(AdaptivePolicy(max_k=4, cost=cost, draft_cost=0.1, draft_overhead=1.0)
                      .decide(state, None)).tolist() == [0]
    with pytest.raises(PolicyError, match="draft_overhead must be >= 0"):
        AdaptivePolicy(max_k=4, draft_overhead=-0.1)


def test_adaptive_backs_off_when_drafting_costs(lm):
    # acceptance estimate a = (A + 1) / (A + R + 2) = 0.5 with A = 1, R = 1... set directly
    state = AdaptiveState(accepted=jnp.asarray([2.0]), rejected=jnp.asarray([2.0]))
    cost = (1.0,) * 16  # verification is free: with free drafts, draft the most
    free = AdaptivePolicy(max_k=4, cost=cost)
    assert np.asarray(free.decide(state, None)).tolist() == [4]
    # tokens(k) = 2 (1 - 0.5^(k+1)); with d = 0.5 the step costs 1 + 0.5 k: gain 1, 1, 0.875..
    paid = AdaptivePolicy(max_k=4, cost=cost, draft_cost=0.5)
    gain = np.asarray(paid.expected_gain(state))[0]
    want = [2 * (1 - 0.5 ** (k + 1)) / (1 + 0.5 * k) for k in range(5)]
    np.testing.assert_allclose(gain, want, rtol=1e-6)
    assert np.asarray(paid.decide(state, None)).tolist() == [0]  # nothing beats plain
    with pytest.raises(PolicyError, match="draft_cost"):
        AdaptivePolicy(max_k=4, draft_cost=-0.1)


@pytest.mark.filterwarnings("ignore::specjax.cost_curves.CostCurveWarning")  # k 3, then 16
def test_build_fills_the_measured_step_costs(lm, monkeypatch):
    steps = FakeSteps({1: 1.9, 3: 2.4})
    monkeypatch.setattr(dc, "measure_step_ratio", steps)
    curves = []
    monkeypatch.setattr("specjax.bench.curve.verify_curve",
                        lambda *a, **kw: curves.append(1) or flat_curve(*a, **kw))
    for pol in ("adaptive", "smartspec"):
        m = methods.build("early_exit", lm, {"k": "3", "policy": pol, "exit_layer": "1"})
        assert m.policy.step_cost == pytest.approx((1.0, 1.9, 2.4, 2.4))
    assert steps.calls == [(3, 1)] and curves == []  # measured once; no verify curve needed
    m = methods.build("early_exit", lm, {"k": "3", "policy": "adaptive", "exit_layer": "1",
                                         "draft_cost": "refresh"}, batch=4)
    assert m.policy.step_cost == pytest.approx((1.0, 1.9, 2.4, 2.4))
    assert steps.calls[-1] == (3, 4)
    # the caller's cost model is taken as given: numbers, a curve, an overhead, step costs
    # (no verify curve measured for those); builtin times no step
    n, c = len(steps.calls), len(curves)
    for given in ({"draft_cost": "0.05"}, {"cost": "1,1.2,1.4,1.5"}, {"draft_overhead": "0.3"},
                  {"step_cost": "1,1.5,1.6,1.7"}, {"draft_cost": "builtin"},
                  {"cost": "builtin"}, {"cost": "builtin", "draft_cost": "refresh"}):
        import warnings

        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m = methods.build("early_exit", lm, {"k": "3", "policy": "adaptive",
                                                 "exit_layer": "1", **given})
        assert len(steps.calls) == n, given
        # parts without a per-token cost price drafting at nothing, and say so
        parts = "draft_cost" not in given and ("cost" in given or "draft_overhead" in given)
        parts = parts and given.get("cost") != "builtin"
        assert any("without draft_cost=" in str(x.message) for x in w) == parts, given
        if "step_cost" in given:
            assert m.policy.step_cost == (1.0, 1.5, 1.6, 1.7)
        else:
            assert m.policy.step_cost == () and m.policy.draft_cost in (0.0, 0.05)
    assert len(curves) == c + 1  # the parts models that leave cost= unset: measured once, cached
    # the mode: refresh from either field measures again (batch 1's file exists)
    for field in ("cost", "draft_cost"):
        methods.build("early_exit", lm, {"k": "3", "policy": "adaptive", "exit_layer": "1",
                                         field: "refresh"})
        assert len(steps.calls) == n + 1 and steps.calls[-1] == (3, 1)
        n += 1
    assert methods.build("early_exit", lm, {"k": "3", "policy": "adaptive", "exit_layer": "1",
                                            "draft_cost": "0.05"}).policy.draft_cost == 0.05
    m = methods.build("prompt_lookup", lm, {})  # adaptive by default, model-free: not timed
    assert m.policy.name == "adaptive" and m.policy.step_cost == () and len(steps.calls) == n
    with pytest.raises(PolicyError, match="draft_cost must be"):
        methods.build("early_exit", lm, {"policy": "adaptive", "draft_cost": "lots"})


def test_measure_step_ratio_times_the_loop(lm):
    """The real probe on the tiny model: every timed loop runs and gives a positive time."""
    m = methods.build("early_exit", lm, {"k": "3", "exit_layer": "1"})
    out = dc.measure_step_ratio(lm, m.drafter, 2, prefix=16, steps=3, repeats=1)
    assert out["k"] == 3 and out["batch"] == 2 and set(out["step_s"]) == {"1", "3"}
    assert out["plain_step_s"] > 0 and all(s > 0 for s in out["step_s"].values())
    assert set(out["ratio"]) == {"1", "3"} and all(r > 0 for r in out["ratio"].values())


def test_adaptive_batch_drafts_only_when_the_batch_step_pays():
    """One row that would draft alone does not make a batch of poor rows pay for its block."""
    from types import SimpleNamespace

    pol = AdaptivePolicy(max_k=2, cost=(1.0, 1.6, 2.2))
    high = (20.0, 0.0)  # a = 21 / 22: alone, k = 2 (2.866 tokens / 2.2 = 1.30 > 1)
    low = (0.0, 20.0)  # a = 1 / 22: k = 0 (1.045 / 1.6 < 1)

    def decide(rows, live=None):
        st = AdaptiveState(accepted=jnp.asarray([r[0] for r in rows]),
                           rejected=jnp.asarray([r[1] for r in rows]))
        ctx = None if live is None else SimpleNamespace(live=jnp.asarray(live))
        return np.asarray(pol.decide(st, ctx)).tolist()

    assert decide([high]) == [2]
    assert decide([high, high]) == [2, 2]
    # together: (2.866 + 1) tokens for a step of 2.2 = 1.76 per unit < 2 rows: nobody drafts
    assert decide([high, low]) == [0, 0]
    # a finished row neither counts nor drafts
    assert decide([high, low], live=[True, False]) == [2, 0]

    # rows whose drafter rarely offers a draft when asked (a lookup without a match): a row
    # yields 1 + o (2.8657 - 1), and the block is paid with chance 1 - prod(1 - o)
    def decide_o(rows, asked, offered):
        st = AdaptiveState(accepted=jnp.asarray([r[0] for r in rows]),
                           rejected=jnp.asarray([r[1] for r in rows]),
                           asked=jnp.asarray(asked), offered=jnp.asarray(offered))
        return np.asarray(pol.decide(st, None)).tolist()

    # o = 1 / 11: (2 + 2 * 0.1696) / (1 + 0.1736 * 1.2) = 1.936 < 2 rows; alone it still
    # drafts (the chance cancels at batch 1: 1.866 extra tokens > 1.2 extra cost)
    assert decide_o([high, high], [10.0, 10.0], [0.0, 0.0]) == [0, 0]
    assert decide_o([high], [10.0], [0.0]) == [2]
    # o = 1 / 2: (2 + 2 * 0.9329) / (1 + 0.75 * 1.2) = 2.035 > 2; o = 1: the rule above
    assert decide_o([high, high], [1.0, 1.0], [0.0, 0.0]) == [2, 2]
    assert decide_o([high, high], [5.0, 5.0], [5.0, 5.0]) == [2, 2]
    # asks and offers are counted on drafting steps: asked k > 0, offered n_draft > 0
    st = pol.update(pol.init(3), jnp.asarray([2, 2, 0]), jnp.asarray([2, 0, 0]),
                    jnp.asarray([1, 0, 0]))
    assert np.asarray(st.asked).tolist() == [1, 1, 0]
    assert np.asarray(st.offered).tolist() == [1, 0, 0]
    np.testing.assert_allclose(np.asarray(pol.offer_rate(st)), [1.0, 0.5, 1.0])


def test_adaptive_batch_finish_rule_by_hand():
    """Above batch 1 (``batch_value='finish'``, given each row's tokens left) a block of L is
    worth how soon the batch would end, ``min_r E_r(L) / left_r`` with ``E_r(L) = 1 + o_r t
    (g_r(L) - 1)``, over the step's cost; every live row drafts the chosen L."""
    from types import SimpleNamespace

    pol = AdaptivePolicy(max_k=2, cost=(1.0, 1.6, 2.2), batch_trust=0.8, batch_pool=0.0)
    defaults = AdaptivePolicy(max_k=2)
    assert (defaults.batch_value, defaults.batch_trust, defaults.batch_pool) == (
        "finish", 1.0, 8.0)
    high = (20.0, 0.0)  # a = 21 / 22, g = 1, 1.9545, 2.8657
    low = (0.0, 20.0)  # a = 1 / 22, g = 1, 1.0455, 1.0475

    def decide(rows, left, live=None, policy=pol, asked=None, offered=None):
        st = AdaptiveState(accepted=jnp.asarray([r[0] for r in rows]),
                           rejected=jnp.asarray([r[1] for r in rows]),
                           asked=None if asked is None else jnp.asarray(asked),
                           offered=None if offered is None else jnp.asarray(offered))
        live = [True] * len(rows) if live is None else live
        ctx = SimpleNamespace(live=jnp.asarray(live), left=jnp.asarray(left, jnp.int32))
        return np.asarray(policy.decide(st, ctx)).tolist()

    # alike rows: E(2) = 1 + 0.8 * 1.8657 = 2.4926 per 2.2 = 1.133 > E(1) / 1.6 = 1.102 > 1
    assert decide([high, high], [10, 10]) == [2, 2]
    # equal budgets: the poor row sets the end (1.036 / 1.6 < 1): nobody drafts
    assert decide([high, low], [10, 10]) == [0, 0]
    # the good row is the one behind (40 left against 10): the end is its, min_r E_r / left_r
    # = 0.025, 0.0441, 0.0623 for L = 0, 1, 2, per cost 0.025, 0.0276, 0.0283: both draft 2
    # (the sum over rows, 3.913 / 2.2 < 2 rows, would not draft)
    assert decide([high, low], [40, 10]) == [2, 2]
    assert decide([high, low], [40, 10], policy=dataclasses.replace(
        pol, batch_value="rows")) == [0, 0]
    # the poor row behind: 1.036 / 40 per 1.6 < 1 / 40: nobody drafts
    assert decide([high, low], [10, 40]) == [0, 0]
    # a finished row neither counts nor drafts
    assert decide([high, low], [10, 10], live=[True, False]) == [2, 0]
    # min_gain: the chosen block must beat a plain step's value per cost by that factor.
    # Medusa-1 at batch 4 (step costs 1.2526 / 1.6117; A = 3.4, R = 6.6: a = 4.4 / 12 =
    # 0.3667): E(1) = 1.3667, per cost 1.091; E(2) = 1.5011 per 1.6117 = 0.931
    heads = AdaptivePolicy(max_k=2, step_cost=(1.0, 1.2526, 1.6117), batch_pool=0.0)
    seen = [(3.4, 6.6)] * 4
    assert decide(seen, [64] * 4, policy=heads) == [1] * 4
    assert decide(seen, [64] * 4, policy=dataclasses.replace(heads, min_gain=1.1)) == [0] * 4
    # its prior (a = 0.5) still probes: E(1) = 1.5 per 1.2526 = 1.198 > 1.1
    assert decide([(0.0, 0.0)] * 4, [64] * 4,
                  policy=dataclasses.replace(heads, min_gain=1.1)) == [1] * 4
    # the trust: a = 0.7 (A = 6, R = 2), E(1) = 1.7 / 1.6 pays at t = 1, 1.56 / 1.6 not at 0.8
    mid = (6.0, 2.0)
    assert decide([mid, mid], [8, 8]) == [0, 0]
    assert decide([mid, mid], [8, 8], policy=dataclasses.replace(pol, batch_trust=1.0)) == [1, 1]
    # rows that rarely offer (o = 1 / 11): E(2) = 1.1357 for a step of 1 + 0.1736 * 1.2
    assert decide([high, high], [10, 10], asked=[10.0, 10.0], offered=[0.0, 0.0]) == [0, 0]
    assert decide([high, high], [10, 10], asked=[1.0, 1.0], offered=[1.0, 1.0]) == [2, 2]
    # at batch 1 the rule is the row's own (unchanged by batch_value and batch_trust)
    assert decide([mid], [8]) == [1]
    # batch_pool: each row's estimate pulled toward the live rows' pooled one. Rows a = 0.7
    # (6, 2) and 0.4 (1, 2) at t = 1 with a 2-token block at 1.5: alone the poor row's E(1) =
    # 1.4 < 1.5 sets the end; pooled (7 + 1) / (11 + 2) = 0.615 with weight 8 it is (1 + 1 +
    # 8 * 0.615) / (3 + 2 + 8) = 0.533, E(1) = 1.533 > 1.5: both draft one token
    pooled = AdaptivePolicy(max_k=2, cost=(1.0, 1.5, 2.2), batch_pool=0.0)
    poor = (1.0, 2.0)
    assert decide([mid, poor], [8, 8], policy=pooled) == [0, 0]
    assert decide([mid, poor], [8, 8], policy=dataclasses.replace(pooled, batch_pool=8.0)) \
        == [1, 1]
    # a finished row's counts are not pooled: beside a dead perfect row the pool is the poor
    # row's own estimate
    assert decide([poor, (50.0, 0.0)], [8, 8], live=[True, False],
                  policy=dataclasses.replace(pooled, batch_pool=8.0)) == [0, 0]
    for bad, match in (({"batch_value": "sum"}, "batch_value must be 'finish' or 'rows'"),
                       ({"batch_trust": 0.0}, "batch_trust must be in"),
                       ({"batch_trust": "x"}, "batch_trust must be in"),
                       ({"batch_pool": -1.0}, "batch_pool must be >= 0")):
        with pytest.raises(PolicyError, match=match):
            AdaptivePolicy(max_k=2, **bad)


def test_never_pays_by_hand():
    """A cost model under which no draft can pay, fully accepted or at the policy's prior, is
    recognised (and named), and agrees with what the policies decide from their initial
    state, which a step without drafts does not move."""
    from specjax.policies.adaptive import never_pays
    from specjax.policies.smartspec import SmartSpecPolicy

    # k = 1 verifies 2 tokens (1.9), k = 2 and 3 a 4-token block (3.7): a drafting step costs
    # 1.9 + 0.69 + 0.08, 3.7 + 0.69 + 0.16, 3.7 + 0.69 + 0.24 plain steps for at most 2, 3, 4
    # tokens (0.999 acceptance: 1.999, 2.997, 3.994): gains 0.749, 0.659, 0.863
    cost = (1.0, 1.9, 2.8, 3.7)

    def model(c, K, d, o):
        return AdaptivePolicy(max_k=K, cost=c, draft_cost=d, draft_overhead=o)

    why = never_pays(model(cost, 3, 0.08, 0.69))
    assert why is not None and "k = 3" in why and "3.99 tokens for 4.63 plain steps" in why
    assert "every drafted token" in why and "drafting overhead 0.69" in why
    assert never_pays(model(cost, 3, 0.08, 0.0)) is None  # 3.994 / 3.94 > 1
    assert never_pays(model((1.0, 1.05), 1, 0.0, 0.0)) is None
    # at acceptance 0.5 the same cheap block (1.05 for 2 tokens) yields 1.5 tokens: pays; with
    # an overhead of 0.5 (1.5 / 1.55) it does not
    assert never_pays(model((1.0, 1.05), 1, 0.0, 0.0), acceptance=0.5) is None
    why = never_pays(model((1.0, 1.05), 1, 0.0, 0.5), acceptance=0.5)
    assert why is not None and "starts from (0.50)" in why and "1.50 tokens for 1.55" in why
    assert AdaptivePolicy(max_k=3, cost=cost, draft_cost=0.08, draft_overhead=0.69).never_drafts()
    assert SmartSpecPolicy(max_k=3, cost=cost, draft_cost=0.08, draft_overhead=0.69).never_drafts()
    assert AdaptivePolicy(max_k=3, cost=(1.0, 1.05, 1.1, 1.15)).never_drafts() is None
    # the prior decides: an optimistic prior drafts where the default one (0.5) does not
    assert AdaptivePolicy(max_k=1, cost=(1.0, 1.05), draft_overhead=0.5).never_drafts()
    assert AdaptivePolicy(max_k=1, cost=(1.0, 1.05), draft_overhead=0.5, prior_accepted=9.0,
                          prior_rejected=1.0).never_drafts() is None
    with pytest.raises(PolicyError, match="prior_accepted and prior_rejected"):
        AdaptivePolicy(max_k=1, prior_accepted=0.0, prior_rejected=0.0)
    # the hook agrees with the policies' own decisions from their initial state, on random
    # costs, and that state is a fixed point of a step that drafts nothing
    rng = np.random.default_rng(0)
    agree = {True: 0, False: 0}
    zero = jnp.zeros((2,), jnp.int32)
    for _ in range(200):
        K = int(rng.integers(1, 6))
        c = (1.0,) + tuple(np.round(1.0 + np.cumsum(rng.uniform(0.0, 0.8, K)), 3))
        d, o = float(rng.uniform(0, 0.2)), float(rng.uniform(0, 1.0))
        steps = (1.0,) + tuple(np.round(np.maximum.accumulate(  # measured step costs
            1.0 + rng.uniform(0.0, 0.6, K) + np.arange(K) * rng.uniform(0, 0.3)), 3))
        for pol in (AdaptivePolicy(max_k=K, cost=c, draft_cost=d, draft_overhead=o,
                                   prior_accepted=float(rng.uniform(0.5, 9))),
                    SmartSpecPolicy(max_k=K, cost=c, draft_cost=d, draft_overhead=o,
                                    prior=float(rng.uniform(0.3, 0.95))),
                    AdaptivePolicy(max_k=K, step_cost=steps,
                                   prior_accepted=float(rng.uniform(0.5, 9))),
                    SmartSpecPolicy(max_k=K, step_cost=steps,
                                    prior=float(rng.uniform(0.3, 0.95)))):
            never = pol.never_drafts() is not None
            st = pol.init(2)
            assert (np.asarray(pol.decide(st, None)) == 0).all() == never, (c, d, o, pol)
            after = pol.update(st, zero, zero, zero)
            for x, y in zip(jax.tree_util.tree_leaves(after), jax.tree_util.tree_leaves(st)):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6)
            agree[never] += 1
    assert min(agree.values()) > 80  # both outcomes were exercised


def test_generate_decodes_plainly_when_no_draft_can_pay(lm):
    """A speculative run whose policy cannot draft runs plain decoding: the same tokens and
    forwards as plain decoding, greedy and sampled, with a warning and the reason recorded."""
    from specjax.engine import DraftingOffWarning, generate
    from specjax.sampling import SamplingParams

    m = methods.build("early_exit", lm, {"k": "3", "exit_layer": "1"})
    pol = AdaptivePolicy(max_k=3, cost=(1.0, 1.9, 2.8, 3.7), draft_cost=0.08,
                         draft_overhead=0.69)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    plain_tokens = {}
    for sampling in (None, SamplingParams(temperature=0.8, seed=3)):
        plain = generate(lm.model, prompts, max_new_tokens=12, sampling=sampling)
        plain_tokens[sampling is None] = plain.tokens
        with pytest.warns(DraftingOffWarning, match="no draft pays"):
            res = generate(lm.model, prompts, max_new_tokens=12, sampling=sampling,
                           drafter=m.drafter, policy=pol)
        assert res.tokens == plain.tokens
        assert res.target_forwards == [len(t) for t in res.tokens]
        assert res.extra["drafting"].startswith("off: no draft pays")
        assert res.extra["method"] == "early_exit" and res.extra["policy"] == "adaptive"
        assert res.extra["drafted"] == [0, 0] and res.extra["drafted_at"] == [[0] * 3] * 2
    # a policy that can pay runs the speculative loop (no "drafting" entry)
    res = generate(lm.model, prompts, max_new_tokens=12, drafter=m.drafter,
                   policy=AdaptivePolicy(max_k=3, cost=(1.0, 1.05, 1.1, 1.15)))
    assert "drafting" not in res.extra and res.tokens == plain_tokens[True]


def test_model_based_chains_default_policies(lm, monkeypatch):
    monkeypatch.setattr(dc, "measure_step_ratio", FakeSteps({1: 1.9, 3: 2.4}))
    # the EAGLE head keeps a fixed length at batch 1 (greedy: its 3-node tree; a chain of
    # k = 3 otherwise) and is adaptive above
    assert methods.build("eagle", lm, {"head": "random"}).policy.name == "fixed"
    m = methods.build("eagle", lm, {"head": "random"}, batch=4)
    assert m.policy.name == "adaptive" and m.policy.idle_decay is None
    assert m.policy.min_gain == 1.0  # no margin for the EAGLE head
    # not trained for the target, and the Medusa / Hydra heads: chains under adaptive with
    # the idle decay at every batch size (Medusa's batch-1 default is a tree: below; as a
    # chain there it is asked for by its length)
    for name, args in (("early_exit", {"exit_layer": "1"}), ("medusa", {"head": "random"}),
                       ("hydra", {"head": "random"})):
        for batch in (1, 4):
            given = {**args, "k": "3"} if (name, batch) == ("medusa", 1) else args
            m = methods.build(name, lm, given, batch=batch, greedy=False)
            assert m.policy.name == "adaptive" and m.policy.max_k == 3, (name, batch)
            assert m.policy.step_cost == pytest.approx((1.0, 1.9, 2.4, 2.4))
            assert m.policy.idle_decay == methods.UNTRAINED_IDLE_DECAY == 0.995
            # the heads' margin above batch 1 (HEADS_BATCHED_MIN_GAIN), not the early exit's
            want = 1.1 if (name != "early_exit" and batch > 1) else 1.0
            assert m.policy.min_gain == want, (name, batch)
            if name != "medusa":  # greedy: the same chain
                g = methods.build(name, lm, args, batch=batch)
                assert (g.drafter.tree, g.policy.step_cost) == (None, m.policy.step_cost)
    # Medusa's 3-node tree (depth 2) under adaptive, greedy or sampling: each depth's step
    # timed in the loop (both depths verify the 4-token block), not priced again by its nodes
    monkeypatch.setattr(dc, "measure_step_ratio", FakeSteps({1: 1.3, 2: 1.35}))
    for greedy in (True, False):
        m = methods.build("medusa", lm, {"head": "random"}, greedy=greedy)
        assert (m.drafter.tree.num_nodes, m.policy.name, m.policy.max_k) == (3, "adaptive", 2)
        assert m.policy.step_cost == pytest.approx((1.0, 1.3, 1.35))
    monkeypatch.setattr(dc, "measure_step_ratio", FakeSteps({1: 1.9, 3: 2.4}))
    # the batch defaults apply as a set where no policy is given: a record that named
    # `adaptive` with its own options keeps adaptive's min_gain of 1
    for name in ("medusa", "hydra"):
        m = methods.build(name, lm, {"head": "random", "policy": "adaptive"}, batch=4)
        assert (m.policy.name, m.policy.min_gain, m.policy.idle_decay) == (
            "adaptive", 1.0, 0.995)
    # pinned: fixed
    assert methods.build("hydra", lm, {"head": "random", "policy": "fixed"}).policy.name == \
        "fixed"
    # pinned, or a tree (which keeps its own shape): fixed
    assert methods.build("early_exit", lm, {"exit_layer": "1", "policy": "fixed"},
                         batch=4).policy.name == "fixed"
    assert methods.build("early_exit", lm, {"exit_layer": "1", "tree": "dynamic"},
                         batch=4).policy.name == "fixed"
    # model-free drafters keep their own defaults
    assert methods.build("ngram", lm, {}, batch=4).policy.name == "fixed"


def _head_dir(lm, name, path):
    """An untrained ``name`` head for the tiny target saved as a head file at ``path``."""
    target = lm.model
    V = target.cfg.vocab_size
    ids = np.arange(V)
    if name == "medusa":
        from specjax.heads.medusa import MedusaHeadConfig, init_medusa_heads, save_medusa_heads

        cfg = MedusaHeadConfig(num_heads=3, hidden_size=target.cfg.hidden_size, vocab_size=V,
                               draft_vocab=V, target_layers=target.cfg.num_layers)
        _, state = init_medusa_heads(cfg, target, ids)
        return save_medusa_heads(path, cfg, state, ids)
    from specjax.heads.hydra import HydraHeadConfig, init_hydra_heads, save_hydra_heads

    cfg = HydraHeadConfig.for_target(target.cfg, 3, V)
    _, state = init_hydra_heads(cfg, target, ids, seed=0)
    return save_hydra_heads(path, cfg, state, ids)


def test_heads_start_from_their_measured_acceptance_above_batch_1(lm, monkeypatch, tmp_path):
    """Above batch 1 the Medusa-1 and Hydra++ heads start `adaptive` from the first-token
    acceptance their head file records for the run's temperature, at the even prior's
    weight, so a machine whose one-token step costs too much for that acceptance (under the
    heads' 1.1 margin) decodes plainly from the start, and one where it costs little drafts;
    a head without a record, a prior given in part, batch 1, a policy given, a lossy
    verifier, and sampling at an unknown temperature keep the even prior."""
    from specjax.engine import drafting_off, make_loop
    from specjax.heads import measured

    for name, a, a_hot in (("medusa", 0.26, 0.236), ("hydra", 0.335, 0.3)):
        head = str(_head_dir(lm, name, tmp_path / name))
        monkeypatch.setattr(dc, "measure_step_ratio", FakeSteps({1: 1.3, 3: 1.8}))
        bare = methods.build(name, lm, {"head": head}, batch=4).policy  # no record yet
        assert (bare.prior_accepted, bare.prior_rejected, bare.min_gain) == (1.0, 1.0, 1.1)
        assert bare.never_drafts() is None  # the even prior: 1.5 tokens for 1.3 steps
        measured.record(head, measured.AcceptanceRecord(0.0, round(a * 1000), 1000))
        measured.record(head, measured.AcceptanceRecord(0.7, round(a_hot * 1000), 1000))
        m = methods.build(name, lm, {"head": head}, batch=4)
        assert m.drafter.head_dir == head
        assert m.policy.prior_accepted == pytest.approx(2 * a, abs=1e-3), name
        assert m.policy.prior_rejected == pytest.approx(2 * (1 - a), abs=1e-3), name
        # 1 + a tokens (1.26-1.34) for 1.3 plain steps, under the 1.1 margin: no draft pays
        why = m.policy.never_drafts()
        assert why is not None and "min_gain" in why and f"({a:.2f})" in why, (name, why)
        loop = make_loop(lm.model, drafter=m.drafter, policy=m.policy, verifier=m.verifier)
        assert drafting_off(loop) == why
        # sampling: the record at the nearest positive temperature, none when unknown
        for t in (0.7, 1.0, 0.2):
            hot = methods.build(name, lm, {"head": head}, batch=4, greedy=False,
                                temperature=t).policy
            assert hot.prior_accepted == pytest.approx(2 * a_hot, abs=1e-3), (name, t)
        unknown = methods.build(name, lm, {"head": head}, batch=4, greedy=False).policy
        assert (unknown.prior_accepted, unknown.prior_rejected) == (1.0, 1.0), name
        # a one-token step of 1.05 plain steps: the heads draft
        monkeypatch.setattr(dc, "measure_step_ratio", FakeSteps({1: 1.05, 3: 1.2}))
        cheap = methods.build(name, lm, {"head": head, "draft_cost": "refresh"},
                              batch=4).policy
        assert cheap.step_cost[1] == pytest.approx(1.05) and cheap.never_drafts() is None
        untrained = methods.build(name, lm, {"head": "random"}, batch=4).policy
        assert (untrained.prior_accepted, untrained.prior_rejected) == (1.0, 1.0), name
        one = methods.build(name, lm, {"head": head, "k": "3"}, batch=1).policy
        assert (one.prior_accepted, one.prior_rejected) == (1.0, 1.0), name
        lossy = methods.build(name, lm, {"head": head, "verifier": "typical"}, batch=4,
                              greedy=False, temperature=0.7).policy  # records: the exact rule
        assert (lossy.prior_accepted, lossy.prior_rejected) == (1.0, 1.0), name
        part = methods.build(name, lm, {"head": head, "prior_accepted": "3"}, batch=4).policy
        assert (part.prior_accepted, part.prior_rejected) == (3.0, 1.0), name
        # the batch defaults apply as a set: a policy or a tree given, no prior from them
        own = methods.build(name, lm, {"head": head, "policy": "adaptive"}, batch=4).policy
        assert (own.prior_accepted, own.prior_rejected, own.min_gain) == (1.0, 1.0, 1.0)
        fixed = methods.build(name, lm, {"head": head, "policy": "fixed"}, batch=4).policy
        assert fixed.name == "fixed", name
