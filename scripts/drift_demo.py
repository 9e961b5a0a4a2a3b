"""The operations loop on the embedded pair: baseline sweep -> deploy --baseline -> serve -> steady traffic -> shift
-> the monitor flags drift and recommends k. Also measures the drift test's false-alarm rate.

    python scripts/drift_demo.py [--steady 120] [--shifted 90] [--out DIR | --docs]
    python scripts/drift_demo.py --quick      # every phase seconds long (about a minute; the README's quick tour)
    python scripts/drift_demo.py --false-alarm-runs 3 --false-alarm-minutes 10 --simulate 2000

1. `trtspec build build_configs/tiny-torch.yaml` (once), then the baseline sweep on the steady suite (`trtspec sweep`,
   engine, greedy, k 0 and the deployed k, the deployed concurrency; once, kept in --work),
2. `trtspec deploy --backend torch --baseline RESULTS` (the baseline, rules and dashboard go into the repository),
3. a real tritonserver; closed-loop traffic at --concurrency from the steady suite, then from the shifted suite,
   while the monitor scrapes every second (the same Monitor `trtspec monitor` runs),
4. writes WORK/timeline.jsonl (one line per scrape), OUT/acceptance.png (per-position conditional acceptance over
   the window, baseline dashed, drift marked), OUT/dashboard-steady.txt and OUT/dashboard-shifted.txt (the dashboard
   as text) and prints when drift was flagged relative to the shift. OUT is --out, by default --work
   (out/drift-demo, not tracked); --docs writes OUT = docs/operations/, the tracked copies docs/operations.md shows
   (`make assets` regenerates them so).
False alarms: --false-alarm-runs N serves unshifted traffic N times for --false-alarm-minutes each and counts runs
that alarmed; --simulate M replays the recorded unshifted per-scrape accept streams (block bootstrap, 10-minute
streams) M times through the detector offline and reports the fraction that alarmed.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS_OUT = ROOT / "docs" / "operations"  # the tracked figure and dashboards of docs/operations.md (--docs)
# --quick: every phase seconds long, small sweeps (the README's quick tour runs it as a test); a flag given wins.
# Its own --work: a sweep resumes its results file, so a full run must not find a quick run's there.
QUICK = {"work": ROOT / "out" / "drift-demo-quick", "steady": 4.0, "shifted": 4.0, "num_prompts": 2, "concurrency": 2,
         "max_tokens": 16, "prompt_tokens": 32}


def sh(*args: str) -> None:
    print("[demo] $ trtspec " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "trtspec", *args], check=True)


def prepare(args: argparse.Namespace) -> Path:
    """Bundle, baseline sweep, repository (each only once per --work)."""
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    build = work / "build"
    if not (build / "trtspec-manifest.json").is_file():
        sh("build", str(ROOT / "build_configs" / "tiny-torch.yaml"), "--out", str(build))
    max_k = args.max_k or args.k  # calibrated up to max_k + 1 tokens: the recommendation may choose 1..max_k
    results = work / "baseline.jsonl"
    config = work / "baseline-sweep.yaml"
    config.write_text(json.dumps({
        "model": "tiny", "methods": ["draft_target"], "drafts": ["tiny-draft"], "k": [0, args.k],
        "temperatures": [0.0], "suites": [args.steady_suite], "concurrency": [args.concurrency],
        "num_prompts": args.num_prompts, "max_new_tokens": args.max_tokens, "prompt_tokens": args.prompt_tokens,
        # one torch thread: on a shared CPU, a multi-threaded sweep measures contention, not the models
        "calibration_batch_sizes": [1, args.concurrency], "max_draft_len": max_k, "threads": 1}))
    sh("sweep", str(config), "--out", str(results), "--no-progress")
    repo = work / "repo"
    logging = ["--log-prompts", str(args.log_prompts), "--log-sample-rate", "1"] if args.log_prompts else []
    sh("deploy", "--backend", "torch", "--build", str(build), "--out", str(repo), "--k", str(args.k),
       "--max-k", str(max_k), "--baseline", str(results), "--force", *logging)
    return repo


def suite(name: str) -> list[str]:
    from trtspec.sweep.prompts import load_suite

    return list(load_suite(name).prompts)


def scenario(repo: Path, phases: list[tuple[str, list[str], float]], args: argparse.Namespace,
             capture: dict[str, Path] | None = None) -> tuple[list, object]:
    """Serve `repo`, run the phases with the monitor; returns (ticks, traffic counts)."""
    from trtspec.contracts.baseline import load_baseline
    from trtspec.ops.monitor import Monitor
    from trtspec.triton.server import TritonServer

    with TritonServer(repo) as server:
        monitor = Monitor(args.window, load_baseline(repo), price_per_hour=args.price_per_hour,
                          models={"tensorrt_llm"})
        return watch(server, monitor, phases, args, capture)


def watch(server: object, monitor: object, phases: list, args: argparse.Namespace,
          capture: dict[str, Path] | None = None, on_tick: object = None) -> tuple[list, object]:
    """Traffic through `phases` on a running server while `monitor` scrapes it; `capture` maps a phase to the file
    that gets the dashboard text at each of its scrapes (so the phase's last one stays); `on_tick(tick)` runs after
    each scrape. Returns (ticks, traffic counts)."""
    from trtspec.ops.dashboard import to_text
    from trtspec.ops.scrape import scraper
    from trtspec.sweep.loadgen import run_phases

    metrics_url = server.metrics_url  # type: ignore[attr-defined]

    def tick_done(tick: object) -> None:
        report = tick.report  # type: ignore[attr-defined]
        if capture and tick.phase in capture and report is not None:  # type: ignore[attr-defined]
            capture[tick.phase].write_text(to_text(monitor.reports(), source=metrics_url))  # type: ignore[attr-defined]
        if args.verbose and report is not None:
            drifted = bool(report.drift and report.drift.drifted)
            stats = " ".join(f"{p.statistic:5.1f}" for p in report.drift.positions) if report.drift else ""
            print(f"[demo] t={tick.t:6.1f}s {tick.phase:8s} {report.model} k={report.k} "  # type: ignore[attr-defined]
                  f"MAL={report.mean_acceptance_length or 0:.2f} c={[round(c, 2) for c in report.conditional_per_pos]} "
                  f"S=[{stats}] {'DRIFT' if drifted else ''}", flush=True)
        if callable(on_tick):
            on_tick(tick)

    return run_phases(server.grpc_url, scraper(metrics_url), monitor, phases,  # type: ignore[attr-defined]
                      concurrency=args.concurrency, max_tokens=args.max_tokens, prompt_tokens=args.prompt_tokens,
                      on_tick=tick_done)


def write_timeline(path: Path, ticks: list) -> None:
    with path.open("w") as f:
        for tick in ticks:
            report = tick.report
            f.write(json.dumps({"t": round(tick.t, 3), "phase": tick.phase,
                                "accepted_per_pos": tick.accepted_per_pos,
                                "rejections_per_pos": tick.rejections_per_pos,
                                "report": report.to_dict() if report else None}, default=str) + "\n")


def plot(path: Path, ticks: list, baseline: object, events: list[tuple[float, str, str]],
         spans: Sequence[tuple[float, float, str]] = ()) -> None:
    """Top: per-position conditional acceptance over the window, baseline dashed, and the window's acceptance rate
    (all positions, grey). Bottom: the CUSUM statistic per position and its threshold h. `events` are vertical
    markers (seconds, label, colour); `spans` are shaded intervals without traffic (start, end, label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    rows = [(t.t, t.report) for t in ticks if t.report and t.report.conditional_per_pos]
    positions = max((len(r.conditional_per_pos) for _, r in rows), default=0)
    threshold = next((r.drift.threshold for _, r in rows if r.drift), None)
    for i in range(positions):
        line, = top.plot(*broken([(t, r.conditional_per_pos[i]) for t, r in rows if i < len(r.conditional_per_pos)]),
                         label=f"position {i}")
        if i < len(baseline.conditional_per_pos):  # type: ignore[attr-defined]
            top.axhline(baseline.conditional_per_pos[i], color=line.get_color(), linestyle="--", linewidth=0.8)  # type: ignore[attr-defined]
        stats = [(t, next((p.statistic for p in r.drift.positions if p.position == i), None)) for t, r in rows
                 if r.drift]
        bottom.plot(*broken([(t, v) for t, v in stats if v is not None]), color=line.get_color())
    top.plot(*broken([(t, r.acceptance_rate) for t, r in rows if r.acceptance_rate is not None]), color="grey",
             linewidth=2.5, alpha=0.6, label="acceptance rate (window)")
    if threshold is not None:
        bottom.axhline(threshold, color="red", linestyle=":", label=f"threshold h = {threshold:.1f}")
        bottom.set_yscale("symlog", linthresh=threshold)
        bottom.legend(loc="upper left", fontsize=8)
    for ax in (top, bottom):
        for t, _, color in events:
            ax.axvline(t, color=color, linewidth=1.2)
        for start, end, _ in spans:
            ax.axvspan(start, end, color="lightgrey", alpha=0.5)
    for i, (t, label, color) in enumerate(events):
        top.annotate(label, (t, 1.04 + 0.07 * (i % 3)), xytext=(3, 0), textcoords="offset points", color=color,
                     fontsize=8)
    for start, end, label in spans:
        top.annotate(label, ((start + end) / 2, 0.05), ha="center", rotation=90, fontsize=8)
    top.set_ylabel("conditional acceptance (window)")
    top.set_ylim(0, 1.25 if events else 1.02)
    top.set_yticks([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    top.set_title("tensorrt_llm: per-position acceptance over the window (dashed: deploy-time baseline)")
    top.legend(loc="lower left", fontsize=8)
    bottom.set_ylabel("CUSUM statistic")
    bottom.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def broken(points: list[tuple[float, float]], gap_s: float = 5.0) -> tuple[list[float], list[float]]:
    """(xs, ys) with a NaN wherever consecutive points are more than gap_s apart: no line across a pause."""
    xs: list[float] = []
    ys: list[float] = []
    for t, v in points:
        if xs and t - xs[-1] > gap_s:
            xs.append(xs[-1])
            ys.append(float("nan"))
        xs.append(t)
        ys.append(v)
    return xs, ys


def dispersion(streams: list[tuple[list[float], list[float]]], baseline: object) -> list[float]:
    """Pearson's dispersion per position over the recorded scrapes: sum (x - n p0)^2 / (n p0 (1 - p0)) / scrapes;
    1 for independent trials at p0, larger when a scrape's trials are correlated (tokens of one request)."""
    out = []
    for i, p0 in enumerate(baseline.conditional_per_pos):  # type: ignore[attr-defined]
        terms = [(acc[i] - (acc[i] + rej[i]) * p0) ** 2 / ((acc[i] + rej[i]) * p0 * (1 - p0))
                 for acc, rej in streams if i < len(acc) and i < len(rej) and acc[i] + rej[i] > 0]
        out.append(sum(terms) / len(terms) if terms and 0 < p0 < 1 else float("nan"))
    return out


def simulate(streams: list[tuple[list[float], list[float]]], baseline: object, runs: int, length: int,
             block: int = 10, seed: int = 0, dispersion: float | None = None) -> float:
    """Fraction of bootstrapped `length`-scrape streams (blocks of `block` consecutive recorded scrapes) in which
    the CUSUM alarmed, with the baseline's p0 (and the default dispersion unless given)."""
    from trtspec.ops.drift import CusumDetector, DriftConfig

    rng = random.Random(seed)
    alarms = 0
    config = DriftConfig(horizon=length) if dispersion is None else DriftConfig(horizon=length, dispersion=dispersion)
    for _ in range(runs):
        det = CusumDetector(baseline.conditional_per_pos, baseline.trials_per_pos,  # type: ignore[attr-defined]
                            config)
        steps = 0
        while steps < length and not det.status().drifted:
            start = rng.randrange(0, max(len(streams) - block, 1))
            for acc, rej in streams[start:start + block]:
                det.update(acc, rej)
                steps += 1
        alarms += det.status().drifted
    return alarms / runs


def build_parser(doc: str) -> argparse.ArgumentParser:
    """The demo's options (scripts/ops_loop.py adds its own to these)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "drift-demo")
    parser.add_argument("--out", type=Path, default=None, help="where the figure and the dashboards go (default: "
                        "--work)")
    parser.add_argument("--docs", action="store_true", help=f"write them into {DOCS_OUT.relative_to(ROOT)}/, "
                        "replacing the tracked copies the docs show")
    parser.add_argument("--steady-suite", default="code")
    parser.add_argument("--shifted-suite", default="grounded")
    parser.add_argument("--steady", type=float, default=120.0, help="seconds of steady traffic before the shift")
    parser.add_argument("--shifted", type=float, default=90.0, help="seconds of shifted traffic")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--num-prompts", type=int, default=64, help="baseline sweep prompts of the steady suite")
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--price-per-hour", type=float, default=2.5)
    parser.add_argument("--false-alarm-runs", type=int, default=0)
    parser.add_argument("--false-alarm-minutes", type=float, default=10.0)
    parser.add_argument("--simulate", type=int, default=0, help="offline bootstrap runs over recorded streams")
    parser.add_argument("--max-k", type=int, default=None, help="deploy's max_k and the baseline's calibration "
                        "range: the largest k a recommendation may choose (default --k)")
    parser.add_argument("--log-prompts", type=Path, default=None, help="deploy with every prompt logged here")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a run of about a minute: every phase a few seconds, "
                        "small sweeps, short requests, its own --work (out/drift-demo-quick); flags given win")
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None,
               quick: dict[str, object] | None = None) -> argparse.Namespace:
    """The parsed options with --out resolved: --docs -> docs/operations, else --out, else --work. With --quick, the
    QUICK defaults (and `quick`, a caller's own) replace the parser's; the flags given still win."""
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**(QUICK | (quick or {})))
        args = parser.parse_args(argv)
    if args.docs and args.out is not None:
        parser.error("--docs writes into docs/operations; give --out DIR or --docs, not both")
    args.out = DOCS_OUT if args.docs else (args.out or args.work)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(__doc__), argv)

    from trtspec.contracts.baseline import load_baseline

    repo = prepare(args)
    baseline = load_baseline(repo)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.steady > 0 or args.shifted > 0:
        phases = [("steady", suite(args.steady_suite), args.steady), ("shifted", suite(args.shifted_suite),
                                                                     args.shifted)]
        ticks, counts = scenario(repo, phases, args, capture={"steady": args.out / "dashboard-steady.txt",
                                                              "shifted": args.out / "dashboard-shifted.txt"})
        write_timeline(args.work / "timeline.jsonl", ticks)
        shift_t = next((t.t for t in ticks if t.phase == "shifted"), None)
        alarm = next((t for t in ticks if t.report and t.report.drift and t.report.drift.drifted), None)
        plot(args.out / "acceptance.png", ticks, baseline,
             [(shift_t, "traffic shifts", "black")] * (shift_t is not None)
             + ([(alarm.t, "drift flagged", "red")] if alarm is not None else []))  # no alarm in a short run
        when = "never" if alarm is None else f"at t={alarm.t:.1f}s ({alarm.phase}" + (
            f", {alarm.t - shift_t:.1f}s after the shift)" if shift_t is not None and alarm.t >= shift_t else ")")
        print(f"[demo] drift flagged {when}; {counts.ok} requests ok, {counts.failed} failed")
        last = ticks[-1].report if ticks else None
        if last and last.recommendation:
            print(f"[demo] recommendation: {last.recommendation.message}")
    streams: list[tuple[list[float], list[float]]] = []
    alarmed = 0
    for run in range(args.false_alarm_runs):
        phases = [("steady", suite(args.steady_suite), args.false_alarm_minutes * 60)]
        ticks, counts = scenario(repo, phases, args)
        hit = any(t.report and t.report.drift and t.report.drift.drifted for t in ticks)
        alarmed += hit
        streams += [(t.accepted_per_pos, t.rejections_per_pos) for t in ticks]
        print(f"[demo] unshifted run {run + 1}: {'ALARM' if hit else 'no alarm'} over {len(ticks)} scrapes; "
              f"{counts.ok} requests ok, {counts.failed} failed", flush=True)
    if args.false_alarm_runs:
        print(f"[demo] false alarms: {alarmed}/{args.false_alarm_runs} runs of {args.false_alarm_minutes:g} min")
        (args.work / "unshifted-streams.json").write_text(json.dumps(streams))
    if args.simulate:
        saved = args.work / "unshifted-streams.json"
        streams = streams or (json.loads(saved.read_text()) if saved.is_file() else [])
        if not streams:
            print("[demo] --simulate needs recorded unshifted streams (run --false-alarm-runs first)")
            return 1
        phi = ", ".join(f"{x:.2f}" for x in dispersion(streams, baseline))
        print(f"[demo] recorded unshifted scrapes: {len(streams)}; Pearson dispersion per position: {phi}")
        for value in (1.0, None):
            rate = simulate(streams, baseline, args.simulate, length=600, dispersion=value)
            label = "default" if value is None else f"{value:g}"
            print(f"[demo] simulated false-alarm rate (dispersion {label}): {rate:.4f} of {args.simulate} "
                  f"bootstrapped 10-minute streams")
    return 0


if __name__ == "__main__":
    sys.exit(main())
