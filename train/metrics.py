"""Training metrics: ``metrics.jsonl`` (one JSON object per logged step) and ``curves.png``.

Train lines: ``{"step", "split": "train", "loss", "metrics": {...}, "lr", "tokens_per_s",
"elapsed"}``; validation lines: ``{"step", "split": "val", "loss", "metrics": {...},
"elapsed"}``. ``metrics`` holds the task's scalars (``acc_0``, ``acc_1``, ...: per-position
draft accuracy). ``elapsed`` is wall-clock seconds of training summed over every run of the
recipe (a resumed run continues the count).

Train lines come every ``log_every`` steps and at the last step of each run (so a recipe run
in chunks also logs at the chunk boundaries); each averages the steps since the previous line
of that run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from specjax.distributed import is_main


def _clean(v: Any):
    """A JSON-safe scalar: numpy/jax scalars -> float; NaN/inf -> None."""
    f = float(np.asarray(v))
    return f if math.isfinite(f) else None


class MetricsLog:
    """Appends metric lines to ``path`` (``out_dir/metrics.jsonl``)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        """Drops lines logged after ``step``: a resumed run restarts from the checkpoint at
        ``step`` and logs the later steps again (a crashed run may have logged past it)."""
        if not self.path.exists() or not is_main():
            return
        keep = [ln for ln in self.read() if ln.get("step", 0) <= step]
        self.path.write_text("".join(json.dumps(ln) + "\n" for ln in keep), encoding="utf-8")

    def read(self) -> list[dict]:
        """Every line (unreadable lines, such as a half-written last one, are skipped)."""
        if not self.path.exists():
            return []
        out = []
        for raw in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def write(self, step: int, split: str, loss, metrics: Mapping[str, Any], elapsed: float,
              **extra) -> dict:
        """Appends one line and returns it."""
        rec = {"step": int(step), "split": split, "loss": _clean(loss),
               "metrics": {k: _clean(v) for k, v in sorted(metrics.items())},
               **{k: (_clean(v) if v is not None else None) for k, v in extra.items()},
               "elapsed": round(float(elapsed), 3)}
        if is_main():  # a multi-host run: one process writes
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
        return rec


def plot_curves(metrics_path: str | Path, out_path: str | Path, title: str = "") -> Path | None:
    """Loss and per-position accuracy (``acc_*``) against step, train and validation, from
    ``metrics.jsonl`` into a PNG. Returns the path, or ``None`` when there is nothing to plot.

    Raises:
      ImportError: matplotlib is not installed (``pip install matplotlib``).
    """
    lines = MetricsLog(metrics_path).read()
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    accs = sorted({k for ln in lines for k in ln.get("metrics", {}) if k.startswith("acc_")},
                  key=lambda k: (len(k), k))
    fig, axes = plt.subplots(1, 2 if accs else 1, figsize=(11 if accs else 6, 4), squeeze=False)
    styles = {"train": dict(lw=1.0, alpha=0.8), "val": dict(lw=1.6, marker="o", ms=3)}
    for split in ("train", "val"):
        rows = [ln for ln in lines if ln.get("split", "train") == split]
        if not rows:
            continue
        steps = [ln["step"] for ln in rows]
        axes[0][0].plot(steps, [np.nan if ln.get("loss") is None else ln["loss"]
                                for ln in rows], label=split, **styles[split])
        for j, k in enumerate(accs):
            ys = [ln.get("metrics", {}).get(k) for ln in rows]
            if all(y is None for y in ys):
                continue
            axes[0][1].plot(steps, [np.nan if y is None else y for y in ys],
                            color=f"C{j}", ls="-" if split == "train" else "--",
                            label=f"{k} ({split})", **styles[split])
    axes[0][0].set(xlabel="step", ylabel="loss", title="loss")
    axes[0][0].legend()
    if accs:
        axes[0][1].set(xlabel="step", ylabel="accuracy", title="draft accuracy by position",
                       ylim=(0, 1))
        axes[0][1].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out_path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
