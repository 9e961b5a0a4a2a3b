"""PNG plots of a sweep (matplotlib, Agg backend; imported only when a report is rendered).

Every plot has a title, labelled axes and a legend. Lines are grouped by series = variant (method[:draft]),
temperature and suite; plots over k use the lowest concurrency of the sweep.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from trtspec.sweep.analysis import TOLERANCE, CaseRow, Results


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def series_key(row: CaseRow) -> str:
    return f"{row.variant} T={row.params['temperature']:g} {row.suite}"


def _by_series(rows: list[CaseRow]) -> dict[str, list[CaseRow]]:
    groups: dict[str, list[CaseRow]] = defaultdict(list)
    for r in rows:
        groups[series_key(r)].append(r)
    return {k: sorted(v, key=lambda r: r.k) for k, v in sorted(groups.items())}


def _low_concurrency(results: Results) -> list[CaseRow]:
    if not results.rows:
        return []
    low = min(int(r.params["concurrency"]) for r in results.rows)
    return [r for r in results.rows if int(r.params["concurrency"]) == low and r.k > 0]


def render_all(results: Results, out_dir: Path) -> dict[str, Path]:
    """Write every plot into out_dir; returns {name: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    made: dict[str, Path] = {}
    for name, fn in (("acceptance_per_position", _acceptance_per_position),
                     ("acceptance_length_vs_k", _acceptance_length_vs_k),
                     ("throughput_vs_k", _throughput_vs_k),
                     ("speedup_vs_concurrency", _speedup_vs_concurrency),
                     ("predicted_vs_measured", _predicted_vs_measured)):
        fig = fn(plt, results)
        if fig is None:
            continue
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        made[name] = path
    return made


def _legend(ax: Any) -> None:
    """Legend below the axes, so it never hides data."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)


def _finish(ax: Any, **labels: Any) -> None:
    """Title and axis labels, a light grid, integer x ticks, and the legend."""
    from matplotlib.ticker import MaxNLocator

    ax.set(**labels)
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(ax)


def _acceptance_per_position(plt: Any, results: Results) -> Any:
    rows = [r for r in _low_concurrency(results) if r.per_pos]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, group in _by_series(rows).items():
        deepest = group[-1]  # the largest k shows every position
        ax.plot(range(1, len(deepest.per_pos) + 1), deepest.per_pos, marker="o", label=f"{key} (k={deepest.k})")
    _finish(ax, title="Per-position acceptance r_i = P(first i draft tokens accepted)", xlabel="draft position i",
            ylabel="acceptance rate r_i", ylim=(0, 1.05))
    return fig


def _acceptance_length_vs_k(plt: Any, results: Results) -> Any:
    rows = _low_concurrency(results)
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, group in _by_series(rows).items():
        ax.plot([r.k for r in group], [r.tokens_per_step for r in group], marker="o", label=key)
    ks = sorted({r.k for r in rows})
    ax.plot(ks, [k + 1 for k in ks], color="grey", linestyle=":", label="upper bound k + 1")
    _finish(ax, title="Mean acceptance length (tokens per target forward) vs k", xlabel="draft length k",
            ylabel="mean acceptance length")
    return fig


def _throughput_vs_k(plt: Any, results: Results) -> Any:
    rows = _low_concurrency(results)
    if not rows:
        return None
    fig, (ax_tps, ax_spd) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key, group in _by_series(rows).items():
        base = results.baseline_of(group[0])
        ks = ([0] if base else []) + [r.k for r in group]
        tps = ([base.wall_tokens_per_s] if base else []) + [r.wall_tokens_per_s for r in group]
        (line,) = ax_tps.plot(ks, tps, marker="o", label=key)
        measured = [(r.k, r.measured_speedup) for r in group if r.measured_speedup]
        if measured:
            ax_spd.plot(*zip(*measured, strict=True), marker="o", color=line.get_color(), label=key)
        predicted = [(r.k, r.predicted_speedup) for r in group if r.predicted_speedup]
        if predicted:
            ax_spd.plot(*zip(*predicted, strict=True), linestyle="--", color=line.get_color(), alpha=0.7)
    ax_spd.plot([], [], color="black", marker="o", label="measured (solid)")
    ax_spd.plot([], [], color="black", linestyle="--", label="predicted by the cost model (dashed)")
    ax_spd.axhline(1.0, color="grey", linestyle=":", label="no speedup")
    _finish(ax_tps, title="Output tokens/s (wall clock) vs k (k = 0: plain decoding)", xlabel="draft length k",
            ylabel="tokens/s")
    _finish(ax_spd, title=f"Speedup over plain decoding vs k ({results.timing} time)", xlabel="draft length k",
            ylabel="speedup (x)")
    return fig


def _speedup_vs_concurrency(plt: Any, results: Results) -> Any:
    rows = [r for r in results.rows if r.k > 0 and r.measured_speedup]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_series: dict[str, list[CaseRow]] = defaultdict(list)
    for r in rows:
        by_series[series_key(r)].append(r)
    for key, group in sorted(by_series.items()):
        low = min(int(r.params["concurrency"]) for r in group)
        best_k = max((r for r in group if int(r.params["concurrency"]) == low), key=lambda r: r.measured_speedup).k
        pts = sorted((int(r.params["concurrency"]), r.measured_speedup) for r in group if r.k == best_k)
        ax.plot(*zip(*pts, strict=True), marker="o", label=f"{key} k={best_k}")
    ax.axhline(1.0, color="grey", linestyle=":", label="no speedup")
    ax.set(title=f"Measured speedup vs concurrency ({results.timing} time; best k at the lowest concurrency)",
           xlabel="concurrency (requests in flight)", ylabel="speedup (x)")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig


def _predicted_vs_measured(plt: Any, results: Results) -> Any:
    rows = [r for r in results.rows if r.k > 0 and r.measured_speedup and r.predicted_speedup]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 6))
    methods = sorted({r.variant for r in rows})
    for variant in methods:
        pts = [(r.measured_speedup, r.predicted_speedup) for r in rows if r.variant == variant]
        ax.scatter(*zip(*pts, strict=True), label=variant, alpha=0.8)
    hi = max(max(r.measured_speedup, r.predicted_speedup) for r in rows) * 1.1  # type: ignore[type-var]
    lo = min(min(r.measured_speedup, r.predicted_speedup) for r in rows) * 0.9  # type: ignore[type-var]
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", linewidth=1, label="predicted = measured")
    ax.fill_between(xs, [x * (1 - TOLERANCE) for x in xs], [x * (1 + TOLERANCE) for x in xs], color="green",
                    alpha=0.12, label=f"within {TOLERANCE:.0%}")
    ax.set(title="Cost model: predicted vs measured speedup", xlabel="measured speedup (x)",
           ylabel="predicted speedup (x)", xlim=(lo, hi), ylim=(lo, hi))
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig
