"""scripts/numerics_where.py: where a verify block stops matching one-token decoding."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from script_helpers import SCRIPTS, load_script


@pytest.mark.long  # suite time (47 s); the planted difference below runs the same script
def test_reports_nothing_where_the_forward_is_invariant(tmp_path):
    # XLA's default CPU options, as users run (the suite's -O0 backend is not what exact
    # numerics are about; tests/test_numerics.py runs its checks the same way)
    out = tmp_path / "where.json"
    env = dict(os.environ, XLA_FLAGS="", SPECJAX_PROBE_CACHE="off")
    r = subprocess.run([sys.executable, str(SCRIPTS / "numerics_where.py"), "--precision",
                        "float32", "--batch", "2", "--heads", "4,2", "--k", "3", "--layers", "1",
                        "--json", str(out)], capture_output=True, text=True, env=env,
                       cwd=Path(__file__).parents[1], timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    for v in ("full", "attention_only", "mlp_only"):
        assert f"{v:<15} identical" in r.stdout
    assert json.loads(out.read_text())["differences"] == []


def test_a_difference_is_found_and_placed(monkeypatch):
    """A forward that perturbs the logits of multi-token blocks only: each token's logits are
    reported, the keys, values and residual streams are not."""
    mod = load_script("numerics_where")
    fwd = mod._fwd

    def perturbed(model, tokens, *a, **kw):
        out = fwd(model, tokens, *a, **kw)
        if tokens.shape[1] > 1:
            out = dataclasses.replace(out, logits=out.logits + 1.0)
        return out

    monkeypatch.setattr(mod, "_fwd", perturbed)
    d = mod.compare("float32", 1, (2, 2), 2, 1, "full")
    assert [(x["token"], x["quantity"]) for x in d if x["quantity"] == "logits"] == \
        [(0, "logits"), (1, "logits")]
    assert all(abs(x["max_abs_diff"] - 1.0) < 1e-3 for x in d if x["quantity"] == "logits")


def test_bad_arguments_are_named():
    mod = load_script("numerics_where")
    for argv in (["--heads", "3,2"], ["--k", "0"], ["--variants", "full,nope"]):
        with pytest.raises(SystemExit):
            mod.main(argv)
