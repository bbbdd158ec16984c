"""scripts/step_costs_from_journal.py: steps counted by verify block from ``drafted_at``, and
the fit recovers step costs a synthetic journal was written with."""

import json

import pytest
from script_helpers import load_script

PLAIN_STEP = 0.05  # seconds
COSTS = {"idle": 1.05, 2: 1.2, 4: 1.5, 8: 2.1, 17: 2.9}  # K = 16: blocks 1, 2, 4, 8, 16, 17


@pytest.fixture(scope="module")
def sc():
    return load_script("step_costs_from_journal")


def drafted_at(lengths, K=16):
    """``drafted_at[i]``: the steps that drafted more than ``i`` tokens."""
    return [sum(n > i for n in lengths) for i in range(K)]


def spec_run(q, cat, idle, lengths, costs=COSTS, method="m"):
    from specjax.buckets import verify_block

    t = idle * costs["idle"] + sum(costs[verify_block(n, 16)] for n in lengths)
    return {"method": method, "category": cat, "prompt_ids": [q], "batch_size": 1,
            "wall_s": 0.4 + t * PLAIN_STEP * (1 + q / 100), "prefill_s": 0.4,
            "forwards": idle + len(lengths), "drafted_at": drafted_at(lengths)}


def journal(tmp_path, runs):
    path = tmp_path / "j.jsonl"
    lines = [{"header": {"model": "x"}}]
    for r in runs:
        q = r["prompt_ids"][0]
        plain = {"method": "ar", "category": r["category"], "prompt_ids": [q],
                 "batch_size": 1, "wall_s": 0.3 + 100 * PLAIN_STEP * (1 + q / 100),
                 "prefill_s": 0.3, "forwards": 100, "drafted_at": None}
        lines.append({"group": str(q), "runs": [plain, r]})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_blocks_from_drafted_at(sc, tmp_path):
    from specjax.bench.journal import read_journal

    # 3 idle steps, drafts of 1, 1, 3 and 16 tokens: blocks 2, 2, 4 and 17
    _, groups = read_journal(journal(tmp_path, [spec_run(7, "a", 3, [1, 1, 3, 16])]))
    step, rows = sc.runs_of(groups)
    assert step[7] == pytest.approx(PLAIN_STEP * 1.07)
    ((m, c, q, t, idle, blocks),) = rows
    assert (m, c, q, idle) == ("m", "a", 7, 3)
    assert dict(blocks) == {2: 2, 4: 1, 17: 1}
    assert t == pytest.approx(3 * 1.05 + 2 * 1.2 + 1.5 + 2.9)


def test_fit_recovers_the_costs(sc, tmp_path):
    from specjax.bench.journal import read_journal

    shapes = [(10, [1] * 5 + [3] * 2), (4, [7, 7, 1]), (20, [16, 2, 2, 1]), (0, [5, 3, 1, 1]),
              (7, [16, 16, 6]), (2, [1, 2, 3, 4, 5, 6, 7])]
    runs = [spec_run(i, "ab"[i % 2], idle, lens) for i, (idle, lens) in enumerate(shapes)]
    _, groups = read_journal(journal(tmp_path, runs))
    _, rows = sc.runs_of(groups)
    cost, steps, rms = sc.fit_step_costs(rows, "m")
    assert rms < 1e-6
    assert cost == pytest.approx({"idle": 1.05, "T=2": 1.2, "T=4": 1.5, "T=8": 2.1,
                                  "T=17": 2.9})
    assert steps["idle"] == 43 and steps["T=17"] == 3
    # a curve that prices every step as it ran: measured / predicted 1 (idle steps at 1.05
    # were run, 1 predicted: a little over)
    curve = {1: 1.0, 2: 1.2, 4: 1.5, 8: 2.1, 16: 2.5, 17: 2.9}
    ratio = sc.measured_over_predicted(rows, "m", curve)
    assert set(ratio) == {"(all)", "a", "b"}
    assert all(1.0 <= r < 1.05 for r in ratio.values())
    with pytest.raises(ValueError, match="no block size"):
        sc.measured_over_predicted(rows, "m", {1: 1.0, 2: 1.2})
