#!/usr/bin/env python3
"""Several edge runs side by side (an A/B of builds or configurations): per body and load,
each run's client-side goodput with its late answers (those the server held past the
objective in brackets) and refusals; then each run's capacity (and with JSON bodies, where
the run measured it), its answers refused at
the deadline (`overran`, from the server's metrics) and whether perf_analyzer completed;
then each rate's refusals after waiting (`timed_out` and `overran` at the client), the
refusals that took the client more than 10 ms, and the refusals' p50 / p99 at the client
(issue 11 asks a few ms at 2x); then, for runs that kept the server's CPU per rate
(`cpu-<body>-<x>.json`), each rate's answers in time per second and the CPU of the
front-end core per request offered: the server's HTTP worker, its decoders, and the
client.
Runs of `run.sh --perf-analyzer-runs N` (perf_analyzer alone, N times) are compared by
how many of their perf_analyzer runs completed, and what stopped the others.

    bench/edge/compare.py NAME=DIR [NAME=DIR ...]
"""
import glob
import json
import os
import re
import sys

LOADS = ("0.25", "0.5", "0.8", "1", "1.5", "2")
# The bodies `run.sh` sends, in the order its tables list them.
FORMATS = ("json", "binary", "grpc", "shm")

# A refusal that took the client longer than this was not "refused early": the issue asks
# a few ms.
SLOW_REFUSAL_MS = 10


def loads_in(*outs):
    """The default loads and any other a run in `outs` had (`run.sh --loads "5 10"`),
    in increasing order, as `run.sh` names them in its files."""
    found = set(LOADS)
    for out in outs:
        for path in glob.glob(f"{out}/*-*.requests.jsonl"):
            found.add(os.path.basename(path).split("-", 1)[1].removesuffix(".requests.jsonl"))
    return sorted(found, key=float)


def overran(out):
    """Requests refused at their deadline over the whole run (the metrics after 2x)."""
    try:
        text = open(f"{out}/metrics-binary-2.txt").read()
    except OSError:
        return "-"
    m = re.search(r'clockwork_requests\{model="squeezenet",outcome="overran"\} (\d+)', text)
    return m.group(1) if m else "-"


def perf_analyzer(out):
    try:
        text = open(f"{out}/perf_analyzer.log").read()
    except OSError:
        return "-"
    return perf_analyzer_result(text)


def perf_analyzer_result(text):
    """What one perf_analyzer log says: completed, or where and on what it stopped."""
    errors = text.count("had error")
    if "Inferences/Second vs." in text:
        # It measured every concurrency; errors are then only printed at its exit.
        return f"completed, {errors} error(s) printed at exit" if errors else "completed"
    concurrency = re.findall(r"Request concurrency: (\d+)", text)
    at = concurrency[-1] if concurrency else "?"
    if not re.search(r"error|fail", text, re.I):
        # Neither its summary nor an error: perf_analyzer is still running (a table
        # made while the bench goes on), or it was killed.
        return f"unfinished at {at}"
    # The server's answer it stopped on, without its advice ("; retry after 1 s").
    stopped = re.search(r"had error: ([^;\n]*)", text)
    return f"failed at {at}" + (f" ({stopped.group(1)})" if stopped else "")


def perf_analyzer_runs(out):
    """Each perf_analyzer run of a `--perf-analyzer-runs` directory, in order."""
    logs = glob.glob(f"{out}/perf_analyzer-*.log")
    logs.sort(key=lambda p: int(re.search(r"-(\d+)\.log$", p).group(1)))
    return [perf_analyzer_result(open(p).read()) for p in logs]


def print_perf_analyzer_runs(runs):
    print("| run | perf_analyzer c1-4 runs | completed | the others |")
    print("| --- | --- | --- | --- |")
    for name, out in runs:
        results = perf_analyzer_runs(out)
        done = sum(r.startswith("completed") for r in results)
        others = "; ".join(r for r in results if not r.startswith("completed")) or "-"
        print(f"| {name} | {len(results)} | {done} | {others} |")


def main():
    runs = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not any(glob.glob(f"{out}/capacity.json") for _, out in runs):
        print_perf_analyzer_runs(runs)
        return
    print_by_rate(runs, outcome)
    print()
    with_json = any(os.path.exists(f"{out}/capacity-json.json") for _, out in runs)
    print(f"| run | capacity/s{' (with JSON bodies)' if with_json else ''} | overran | perf_analyzer c1-4 |")
    print("| --- | --- | --- | --- |")
    for name, out in runs:
        capacity = json.load(open(f"{out}/capacity.json"))["ok_per_s"]
        if os.path.exists(f"{out}/capacity-json.json"):
            capacity = f"{capacity} ({json.load(open(f'{out}/capacity-json.json'))['ok_per_s']})"
        print(f"| {name} | {capacity} | {overran(out)} | {perf_analyzer(out)} |")
    print()
    print_by_rate(runs, refusals)
    print_cpu(runs)


def print_by_rate(runs, cell):
    """One row per body and load, one column per run, each cell `cell(out, fmt, x)`."""
    names = " | ".join(name for name, _ in runs)
    print(f"| body | load | {names} |")
    print("| --- | --- |" + " --- |" * len(runs))
    for fmt in FORMATS:
        for x in loads_in(*(out for _, out in runs)):
            # Runs of some rates only (run.sh --formats, --loads): "-" where a run had
            # none, no row where none had it.
            ran = [os.path.exists(f"{out}/{fmt}-{x}.json") for _, out in runs]
            if not any(ran):
                continue
            cells = [cell(out, fmt, x) if r else "-" for (_, out), r in zip(runs, ran)]
            print(f"| {fmt} | {x}x | " + " | ".join(cells) + " |")


def outcome(out, fmt, x):
    """Goodput, late answers (those late leaving the server) and refusals of one rate."""
    r = json.load(open(f"{out}/{fmt}-{x}.json"))
    in_server = r.get("late_in_server")
    late = f"{r['late']} ({'-' if in_server is None else in_server})"
    return f"{r['goodput']:.3f}, late {late}, refused {r['refused']}"


def refusals(out, fmt, x):
    """Refused after waiting (timed out / overran), refusals that took the client more
    than `SLOW_REFUSAL_MS` (of any kind: after reading and decoding too), and the
    refusals' p50 / p99 (ms), at the client; "-" where none was refused."""
    r = json.load(open(f"{out}/{fmt}-{x}.json"))
    if not r["refused"]:
        return "-"
    by = r["refused_by_type"]
    slow = "?"
    log = f"{out}/{fmt}-{x}.requests.jsonl"
    if os.path.exists(log):
        rows = (json.loads(line) for line in open(log))
        slow = sum(1 for q in rows if q["status"] != 200 and q["latency_ms"] > SLOW_REFUSAL_MS)
    return (f"{by.get('timed_out', 0)} / {by.get('overran', 0)}; {slow} past {SLOW_REFUSAL_MS} ms; "
            f"{r['refused_p50_ms']:.1f} / {r['refused_p99_ms']:.1f}")


def cpu(out, fmt, x):
    """Answers in time per second, and the front-end CPU per request offered (ms): HTTP
    worker / decoders / client."""
    r = json.load(open(f"{out}/{fmt}-{x}.json"))
    server = json.load(open(f"{out}/cpu-{fmt}-{x}.json"))
    per = lambda s: f"{s / max(r['offered'], 1) * 1e3:.2f}"
    good = r["good"] / r["duration_s"]
    return (f"{good:.0f}/s; {per(server.get('http', 0))} / "
            f"{per(server.get('tokio-rt-worker', 0))} / {per(r.get('client_cpu_s') or 0)}")


def print_cpu(runs):
    """Each run's CPU per rate, for the runs that kept it."""
    runs = [(name, out) for name, out in runs if glob.glob(f"{out}/cpu-*-*.json")]
    if runs:
        print()
        print_by_rate(runs, cpu)


if __name__ == "__main__":
    main()
