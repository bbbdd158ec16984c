"""The bench's figures (PNG). matplotlib is imported inside the functions: it is an optional
dependency (``pip install -e '.[bench]'``), needed only with ``--plot``."""

from __future__ import annotations

from pathlib import Path


def plot(summary: dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["rows"]
    cats = summary["categories"] + ["ALL"]
    methods = [m for m in summary["methods"] if m != "ar"]
    sweep = summary.get("by_batch_size")
    if sweep and not rows:  # --sweep-only: no per-category rows, two batch-size panels
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        plot_batch_sizes(axes[0], sweep)
        plot_batch_speedups(axes[1], sweep)
        fig.tight_layout()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return
    fig, axes = plt.subplots(1, 3 if sweep else 2, figsize=(19.5 if sweep else 13, 4.5))
    ax = axes[0]
    w = 0.8 / max(len(methods), 1)
    for i, m in enumerate(methods):
        vals = [next((r["speedup_vs_ar"] or 0 for r in rows
                      if r["method"] == m and r["category"] == c), 0) for c in cats]
        ax.bar([j + i * w for j in range(len(cats))], vals, width=w, label=m)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks([j + w * (len(methods) - 1) / 2 for j in range(len(cats))])
    ax.set_xticklabels(cats, rotation=30, ha="right")
    ax.set_ylabel("speedup over ar (same run)")
    ax.set_title("Speedup by method and category")
    ax.legend(fontsize=8)
    ax = axes[1]
    for m in methods:
        r = next((r for r in rows if r["method"] == m and r["category"] == "ALL"), None)
        if r and r.get("acceptance_by_position"):
            ys = [v if v is not None else float("nan") for v in r["acceptance_by_position"]]
            ax.plot(range(1, len(ys) + 1), ys, marker="o", label=m)
    ax.set_xlabel("draft position (tree depth)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("acceptance rate (given drafted)")
    ax.set_ylim(0, 1.02)
    ax.set_title("Acceptance by draft position (all categories)")
    ax.legend(fontsize=8)
    if sweep:
        plot_batch_sizes(axes[2], sweep)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_batch_sizes(ax, sweep: dict):
    """Tokens/s (median, min-max bars) against batch size, one line per method."""
    bs = sweep["batch_sizes"]
    _many_colours(ax, len({r["method"] for r in sweep["rows"]}))
    for m in dict.fromkeys(r["method"] for r in sweep["rows"]):
        rs = {r["batch_size"]: r for r in sweep["rows"] if r["method"] == m}
        xs = [b for b in bs if b in rs]
        ys = [rs[b]["tokens_per_s"] for b in xs]
        err = [[y - rs[b]["tokens_per_s_min"] for b, y in zip(xs, ys)],
               [rs[b]["tokens_per_s_max"] - y for b, y in zip(xs, ys)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=m)
    _batch_axis(ax, bs, "tokens/s (all rows)", "Throughput by batch size (all prompts)")


def _batch_axis(ax, bs, ylabel: str, title: str):
    """A log2 batch-size x axis with ticks at ``bs``, labels, grid and legend."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs)
    ax.set_xticklabels([str(b) for b in bs])
    ax.set_xlabel("batch size (rows decoded together)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _many_colours(ax, n: int, skip: int = 0):
    """Past ten lines the default colour cycle repeats: take twenty colours (``skip`` of
    them left out, so a panel without ``ar`` keeps the other panels' colours)."""
    if n > 10:
        import matplotlib.pyplot as plt

        ax.set_prop_cycle(color=list(plt.cm.tab20.colors)[skip:] + list(
            plt.cm.tab20.colors)[:skip])


def plot_batch_speedups(ax, sweep: dict):
    """Speedup over plain decoding of the same batch size against batch size, one line per
    method (``ar`` is the 1.0 line)."""
    bs = sweep["batch_sizes"]
    _many_colours(ax, len({r["method"] for r in sweep["rows"]}), skip=1)
    for m in dict.fromkeys(r["method"] for r in sweep["rows"] if r["method"] != "ar"):
        rs = {r["batch_size"]: r for r in sweep["rows"]
              if r["method"] == m and r.get("speedup_vs_ar")}
        xs = [b for b in bs if b in rs]
        ax.plot(xs, [rs[b]["speedup_vs_ar"] for b in xs], marker="o", label=m)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    _batch_axis(ax, bs, "speedup over ar at the same batch size",
                "Speedup by batch size (all prompts)")


def plot_verify_curve(curve: dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for B, rel in curve["relative"].items():
        ax.plot(curve["ks"], rel, marker="o", label=f"batch {B}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per row in the forward (k)")
    ax.set_ylabel("time relative to k = 1")
    ax.set_title(f"Verify-cost curve inside the loop (prompt {curve['prefix']})"
                 if curve.get("in_loop") else f"Verify-cost curve (prefix {curve['prefix']})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
