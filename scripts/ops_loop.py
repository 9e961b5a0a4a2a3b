"""The whole operations loop in one run, on one tritonserver: drift -> k applied live -> a sweep checks it -> the
draft retrained on the logged shifted prompts -> rolled out under load -> the monitor sees acceptance recover.

    python scripts/ops_loop.py [--work out/ops-loop] [--out DIR | --docs] [--verbose]
    python scripts/ops_loop.py --quick        # every phase seconds long (about a minute; the README's quick tour)

Built on scripts/drift_demo.py (its options, baseline sweep, deploy, traffic and plot), with every prompt logged:
1. steady traffic (--steady-suite), then the shift (--shifted-suite) while the monitor scrapes every second;
2. at the first scrape after --shifted seconds of shifted traffic (the window then holds only shifted requests), the
   `trtspec monitor --apply` path (ops.monitor.Monitor.apply through triton.control.TritonControl: a drifted model whose recommended
   k differs) reloads tensorrt_llm with the recommended k while the clients keep sending; --applied more seconds;
3. traffic stops; a sweep of the shifted suite over fixed k 0..max_k (engine backend, the baseline sweep's settings:
   one torch thread, the same concurrency, prompt and output lengths; --sweep-repeats rounds, each round every k once,
   so k values are interleaved in time), compared in CPU seconds: throughput at the applied k / at the best fixed k;
4. the prompts logged since the shift go to `trtspec train draft` (its hash split holds some out, never trained on);
5. traffic again, from the held-out prompts only: --before seconds, then `trtspec rollout-draft`'s library path
   (plan_rollout + execute_rollout) in a thread while the clients keep sending, then until --after seconds passed.
Writes OUT/loop-acceptance.png (the window's acceptance over both traffic sessions, markers for the shift, the
alarm, set-k and the rollout; the sweep and training in between are a grey band), OUT/loop-dashboard-*.txt (the
dashboard as text at the end of each phase), OUT/loop-summary.json (every number the docs quote) and
WORK/loop-timeline.jsonl (one line per scrape). OUT is --out, by default --work (out/ops-loop, not tracked); --docs
writes OUT = docs/operations/, the tracked copies docs/operations.md shows (`make assets` regenerates them so).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import drift_demo  # the demo this loop extends (a script's own directory, scripts/, is on sys.path)

ROOT = drift_demo.ROOT


def parse(argv: list[str] | None) -> object:
    parser = drift_demo.build_parser(__doc__)
    parser.add_argument("--applied", type=float, default=40.0, help="seconds of shifted traffic after set-k")
    parser.add_argument("--sweep-prompts", type=int, default=32, help="shifted-suite prompts per sweep case")
    parser.add_argument("--sweep-repeats", type=int, default=2, help="rounds of the k sweep (interleaved)")
    parser.add_argument("--sweep-results", type=Path, nargs="+", default=None, help="reuse these shifted-suite "
                        "sweeps (other runs' WORK/shifted-sweep.jsonl, rounds pooled; each waited for until complete) "
                        "instead of sweeping")
    parser.add_argument("--no-retrain", action="store_true", help="stop after the sweep comparison")
    parser.add_argument("--train-steps", type=int, default=60, help="`trtspec train draft --steps`")
    parser.add_argument("--before", type=float, default=45.0, help="seconds of held-out traffic before the rollout")
    parser.add_argument("--after", type=float, default=150.0, help="seconds of held-out traffic from the rollout "
                        "on (the rollout itself takes about a minute here; the window should then hold only N+1)")
    parser.set_defaults(work=ROOT / "out" / "ops-loop", steady=60.0, shifted=65.0, max_k=8)
    args = drift_demo.parse_args(parser, argv, quick={
        "work": ROOT / "out" / "ops-loop-quick", "applied": 2.0, "max_k": 4, "sweep_prompts": 1, "sweep_repeats": 1,
        "train_steps": 2, "before": 2.0, "after": 2.0})
    args.log_prompts = args.log_prompts or args.work / "prompt-log"
    return args


def shifted_log(log_dir: Path, since: float, out: Path) -> int:
    """Write the log lines of requests that arrived at or after `since` (Unix seconds) to `out`; how many."""
    from trtspec.contracts.prompt_log import log_files

    lines = [raw for f in log_files(log_dir) for raw in f.read_bytes().splitlines()
             if raw.strip() and json.loads(raw).get("time", 0) >= since]
    out.write_bytes(b"\n".join(lines) + b"\n")
    return len(lines)


def heldout_prompts(log: Path) -> list[list[int]]:
    """The held-out side of `trtspec train draft`'s split of `log` (same function, same default recipe)."""
    from transformers import AutoConfig

    from trtspec.contracts.prompt_log import read_prompt_log
    from trtspec.models import resolve_model
    from trtspec.training.distill import DistillRecipe, split_prompts

    logged, _ = read_prompt_log(log)
    vocab = AutoConfig.from_pretrained(resolve_model("tiny", field="target")).vocab_size

    def no_text(text: str) -> list[int]:
        raise ValueError(f"logged prompt without token ids: {text[:40]!r}")

    return split_prompts(logged, no_text, vocab, DistillRecipe()).heldout


def sweep_fixed_k(args: object, k_values: list[int]) -> list[Path]:
    """Sweep the shifted suite over fixed k (see the module docstring), or reuse --sweep-results; the files."""
    if args.sweep_results:  # type: ignore[attr-defined]
        for path in args.sweep_results:  # type: ignore[attr-defined]
            wait_complete(path)
        return list(args.sweep_results)  # type: ignore[attr-defined]
    results = args.work / "shifted-sweep.jsonl"  # type: ignore[attr-defined]
    results.unlink(missing_ok=True)  # a fresh measurement (an existing file would be resumed)
    config = args.work / "shifted-sweep.yaml"  # type: ignore[attr-defined]
    config.write_text(json.dumps({
        "model": "tiny", "methods": ["draft_target"], "drafts": ["tiny-draft"], "k": k_values,
        "temperatures": [0.0], "suites": [args.shifted_suite], "concurrency": [args.concurrency],  # type: ignore[attr-defined]
        "num_prompts": args.sweep_prompts, "max_new_tokens": args.max_tokens,  # type: ignore[attr-defined]
        "prompt_tokens": args.prompt_tokens, "calibration_batch_sizes": [args.concurrency],  # type: ignore[attr-defined]
        "max_draft_len": max(k_values), "threads": 1, "repeats": args.sweep_repeats}))  # type: ignore[attr-defined]
    drift_demo.sh("sweep", str(config), "--out", str(results), "--no-progress")
    return [results]


def sweep_table(files: list[Path]) -> dict[int, dict]:
    """Per fixed k, over every round of every file: the median, lowest and highest tokens per CPU second and per
    wall second (each round's own numbers, as the engine backend recorded them), and the mean acceptance length."""
    from trtspec.sweep.records import read_records

    rounds: dict[int, list[dict]] = {}
    for path in files:
        for rec in read_records(path):
            if rec.get("kind") == "case" and rec.get("status", "ok") == "ok":
                rounds.setdefault(int(rec["params"]["k"]), []).append(rec["metrics"])
    table = {}
    for k, runs in sorted(rounds.items()):
        entry: dict = {"rounds": len(runs),
                       "mean_acceptance_length": round(statistics.fmean(
                           m["stats"]["mean_acceptance_length"] for m in runs), 3)}
        for timing, key in (("cpu", "tokens_per_cpu_s"), ("wall", "tokens_per_s")):
            values = [m[key] for m in runs]
            entry[timing] = {"median": round(statistics.median(values), 1), "min": round(min(values), 1),
                             "max": round(max(values), 1)}
        table[k] = entry
    return table


def keep_scraping(server: object, monitor: object, interval_s: float = 1.0) -> Callable[[], None]:
    """Scrape into `monitor` every interval in a thread (as a running `trtspec monitor` would) until the returned
    function is called (it waits for the thread); a failed scrape is skipped."""
    from trtspec.ops.scrape import scraper

    scrape, stop = scraper(server.metrics_url), threading.Event()  # type: ignore[attr-defined]

    def run() -> None:
        while not stop.wait(interval_s):
            try:
                monitor.observe(scrape())  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001, S112 - the next scrape may work
                continue

    thread = threading.Thread(target=run, name="monitor", daemon=True)
    thread.start()

    def done() -> None:
        stop.set()
        thread.join()

    return done


def wait_complete(results: Path, poll_s: float = 10.0) -> None:
    """Wait until a sweep that another run is writing holds all its cases (k values x repeats)."""
    from trtspec.sweep.records import read_records

    while True:
        records = read_records(results) if results.is_file() else []
        spec = next((r["spec"] for r in records if r.get("kind") == "sweep"), None)
        if spec and sum(r.get("kind") == "case" for r in records) >= len(spec["k"]) * spec.get("repeats", 1):
            return
        print(f"[loop] waiting for {results} to complete", flush=True)
        time.sleep(poll_s)


def compare(table: dict, k: int, timing: str = "cpu") -> dict:
    """Throughput at k over the best fixed k's (medians over the rounds), in one timing."""
    best = max(table, key=lambda kk: table[kk][timing]["median"])
    at_k, at_best = table[k][timing]["median"], table[best][timing]["median"]
    return {"timing": timing, "k": k, "best_k": best, "tokens_per_s_at_k": at_k, "tokens_per_s_at_best": at_best,
            "ratio": round(at_k / at_best, 3)}


def main(argv: list[str] | None = None) -> int:
    from trtspec.contracts.baseline import load_baseline
    from trtspec.ops.monitor import Monitor
    from trtspec.triton.control import TritonControl
    from trtspec.triton.rollout import execute_rollout, plan_rollout
    from trtspec.triton.server import TritonServer

    args = parse(argv)
    t_start = time.time()
    shutil.rmtree(args.log_prompts, ignore_errors=True)
    repo = drift_demo.prepare(args)
    baseline = load_baseline(repo)
    args.out.mkdir(parents=True, exist_ok=True)
    dash = {phase: args.out / f"loop-dashboard-{i}-{phase}.txt" for i, phase in
            enumerate(["steady", "shifted", "set-k", "before-rollout", "rollout"], start=1)}
    summary: dict = {"command": "python scripts/ops_loop.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                     "concurrency": args.concurrency, "window_s": args.window, "k_deployed": args.k,
                     "max_k": args.max_k, "suites": [args.steady_suite, args.shifted_suite]}
    shifted = drift_demo.suite(args.shifted_suite)
    with TritonServer(repo) as server:
        monitor = Monitor(args.window, baseline, price_per_hour=args.price_per_hour, models={"tensorrt_llm"})
        control = TritonControl(server.grpc_url, repo)  # what `trtspec monitor --apply --url URL --repo REPO` uses
        marks: dict = {}

        def session_a(tick: object) -> None:
            if tick.phase == "shifted" and "shift_wall" not in marks:  # type: ignore[attr-defined]
                marks["shift_wall"], marks["shift_t"] = time.time() - 1.0, tick.t  # type: ignore[attr-defined]
            report = tick.report  # type: ignore[attr-defined]
            if report is not None and report.drift and report.drift.drifted and "alarm_t" not in marks:
                marks["alarm_t"] = tick.t  # type: ignore[attr-defined]
            if tick.phase == "set-k" and "set_k_t" not in marks:  # type: ignore[attr-defined]
                marks["set_k_t"] = tick.t  # type: ignore[attr-defined]
                marks["recommendation"] = report.recommendation.to_dict() if report and report.recommendation else None
                marks["drifted_at_apply"] = bool(report and report.drift and report.drift.drifted)
                began = time.monotonic()
                marks["applied"] = monitor.apply(monitor.reports(), control)  # the --apply path, under load
                marks["set_k_s"] = round(time.monotonic() - began, 2)
                message = marks["recommendation"]["message"] if marks["recommendation"] else "no recommendation"
                print(f"[loop] t={tick.t:.1f}s {message}; "  # type: ignore[attr-defined]
                      f"{marks['applied'] or 'nothing applied'} ({marks['set_k_s']} s)", flush=True)

        phases = [("steady", drift_demo.suite(args.steady_suite), args.steady), ("shifted", shifted, args.shifted),
                  ("set-k", shifted, args.applied)]
        ticks_a, counts_a = drift_demo.watch(server, monitor, phases, args, dash, on_tick=session_a)
        rec = marks.get("recommendation") or {}
        served_k = ticks_a[-1].report.k if ticks_a and ticks_a[-1].report else None
        summary["session_a"] = {"requests_ok": counts_a.ok, "requests_failed": counts_a.failed,
                                "errors": counts_a.errors, "drift_after_shift_s": round(marks["alarm_t"] - marks[
                                    "shift_t"], 1) if "alarm_t" in marks and "shift_t" in marks else None,
                                "recommendation": rec, "drifted_at_apply": marks.get("drifted_at_apply"),
                                "applied": marks.get("applied"), "set_k_s": marks.get("set_k_s"),
                                "served_k_after": served_k}
        print(f"[loop] session 1: {counts_a.ok} requests ok, {counts_a.failed} failed; k now {served_k}", flush=True)

        # 3. the sweep that checks the recommendation (the server idles meanwhile)
        gap_start = time.monotonic()
        stop_scraping = keep_scraping(server, monitor)  # the monitor keeps watching the idle server meanwhile
        files = sweep_fixed_k(args, list(range(0, args.max_k + 1)))
        table = sweep_table(files)
        k_rec = int(rec.get("recommended_k", args.k))
        summary["sweep"] = {"files": [str(f) for f in files], "table": table, "cpu": compare(table, k_rec, "cpu"),
                            "wall": compare(table, k_rec, "wall")}
        print(f"[loop] sweep: {summary['sweep']['cpu']}", flush=True)

        if args.no_retrain:
            stop_scraping()
            summary["windows"] = {phase: last_window(ticks_a, phase) for phase in ("steady", "shifted", "set-k")}
            return finish(args, summary, t_start)
        # 4. retrain the draft on the prompts logged since the shift
        log = args.work / "shifted-log.jsonl"
        summary["logged_since_shift"] = shifted_log(args.log_prompts, marks["shift_wall"], log)
        draft = args.work / "draft-v2"
        shutil.rmtree(draft, ignore_errors=True)
        drift_demo.sh("train", "draft", "--model", "tiny", "--draft", "tiny-draft", "--prompts", str(log),
                      "--out", str(draft), "--steps", str(args.train_steps))
        report = json.loads((draft / "training-report.json").read_text())
        summary["train"] = {k: report[k] for k in ("acceptance_before", "acceptance_after", "data", "seconds")
                            if k in report} | {"steps": args.train_steps}
        heldout = heldout_prompts(log)
        gap_s = time.monotonic() - gap_start
        stop_scraping()

        # 5. roll the new draft out under held-out traffic
        rollout: dict = {}

        def do_rollout() -> None:
            began = time.monotonic()
            try:
                rollout["steps"] = [s.model + f" {s.old_version}->{s.new_version}" for s in
                                    execute_rollout(plan_rollout(repo, draft), server.grpc_url)]
            except Exception as exc:  # noqa: BLE001 - recorded and reported; the run goes on
                rollout["error"] = f"{type(exc).__name__}: {exc}"
            rollout["seconds"] = round(time.monotonic() - began, 2)

        worker = threading.Thread(target=do_rollout, name="rollout")

        def session_b(tick: object) -> None:
            if tick.phase == "rollout" and "rollout_t" not in marks:  # type: ignore[attr-defined]
                marks["rollout_t"] = tick.t  # type: ignore[attr-defined]
                worker.start()

        phases = [("before-rollout", heldout, args.before), ("rollout", heldout, args.after)]
        ticks_b, counts_b = drift_demo.watch(server, monitor, phases, args, dash, on_tick=session_b)
        worker.join()
        summary["session_b"] = {"requests_ok": counts_b.ok, "requests_failed": counts_b.failed,
                                "errors": counts_b.errors, "heldout_prompts": len(heldout), "rollout": rollout}
        print(f"[loop] session 2: {counts_b.ok} requests ok, {counts_b.failed} failed; rollout {rollout}", flush=True)

    # the record: timeline, PNG, summary
    offset = (ticks_a[-1].t if ticks_a else 0.0) + 20.0  # the sweep and training, drawn as a 20 s grey band
    ticks = ticks_a + [replace(t, t=t.t + offset) for t in ticks_b]
    drift_demo.write_timeline(args.work / "loop-timeline.jsonl", ticks)
    windows = {phase: last_window(ticks, phase) for phase in dash}
    summary["windows"] = windows
    events = [(marks["shift_t"], "traffic shifts", "black")] if "shift_t" in marks else []
    events += [(marks["alarm_t"], "drift flagged", "red")] if "alarm_t" in marks else []
    if "set_k_t" in marks:
        label = f"set-k {args.k} -> {served_k}" if marks.get("applied") else f"monitor: {rec.get('action', '?')} k={args.k}"
        events.append((marks["set_k_t"], label, "purple"))
    if "rollout_t" in marks:
        events.append((marks["rollout_t"] + offset, "rollout-draft", "green"))
        if "seconds" in rollout:
            events.append((marks["rollout_t"] + offset + rollout["seconds"], "v1 retired", "darkgreen"))
    spans = [(offset - 18.0, offset - 2.0, f"sweep + train ({gap_s / 60:.0f} min, no traffic)")]
    drift_demo.plot(args.out / "loop-acceptance.png", ticks, baseline, events, spans)
    summary["events"] = [{"t": round(t, 1), "event": label} for t, label, _ in events]
    return finish(args, summary, t_start)


def finish(args: object, summary: dict, t_start: float) -> int:
    summary["minutes"] = round((time.time() - t_start) / 60, 1)
    (args.out / "loop-summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")  # type: ignore[attr-defined]
    print(json.dumps(summary, indent=1, default=str))
    return 0


def last_window(ticks: list, phase: str) -> dict | None:
    """The watched model's window at the last scrape of `phase` (the numbers the dashboard capture shows)."""
    report = next((t.report for t in reversed(ticks) if t.phase == phase and t.report), None)
    if report is None:
        return None
    return {"model": report.model, "k": report.k, "mean_acceptance_length": report.mean_acceptance_length,
            "acceptance_rate": report.acceptance_rate, "acceptance_per_pos": report.acceptance_per_pos,
            "tokens_per_s": report.tokens_per_s, "drifted": bool(report.drift and report.drift.drifted),
            "recommendation": report.recommendation.message if report.recommendation else None}


if __name__ == "__main__":
    sys.exit(main())
