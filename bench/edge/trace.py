#!/usr/bin/env python3
"""Where the time went in one edge run: reads the debug lines `run.sh --trace` left in
DIR/server.log (`clockwork::api::trace`) and DIR/*.requests.jsonl (client.py --log).

    bench/edge/trace.py DIR

Prints, for the runs of the served model:
- per batch size: how many ran, the estimate planned with (p50, max) against the measured
  run (p50, p99, max), and how many overran the estimate and by how much at most;
- batch-1 runs by the device's idle time before them (does a run after a pause take
  longer: a cache-cold run?);
- the lag from each batch's earliest start to its measured start;
- every refusal and late answer the server logged, with its times relative to its arrival
  (front end: arrival to submitted; controller: submitted to answer);
- from the client's logs: per format and load, the answers' p50/p99 at the client, in the
  server (Server-Timing `edge`) and outside it (the difference: network and the client).
"""
import datetime
import glob
import json
import os
import re
import sys
from collections import defaultdict

FIELD = re.compile(r"(\w+)=(\"[^\"]*\"|\S+)")


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


def ms(us):
    return None if us is None else round(us / 1000, 2)


def stamp(line):
    """The log line's UTC time in seconds since the epoch."""
    head = line.split(" ", 1)[0].rstrip("Z")
    return datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.timezone.utc).timestamp()


def parse(path, window=None):
    """The trace lines of server.log (within `window`, seconds since the epoch) as
    (message, fields) in order."""
    lines = []
    for line in open(path, errors="replace"):
        if "clockwork::api::trace" not in line:
            continue
        if window and not window[0] <= stamp(line) <= window[1]:
            continue
        rest = line.split("clockwork::api::trace:", 1)[1].strip()
        first = FIELD.search(rest)
        message = rest[: first.start()].strip() if first else rest
        fields = {}
        for key, value in FIELD.findall(rest):
            value = value.strip('"')
            try:
                fields[key] = int(value)
            except ValueError:
                fields[key] = value
        lines.append((message, fields))
    return lines


def batches(lines):
    planned = {f["action"]: f for m, f in lines if m == "planned"}
    done = [f for m, f in lines if m == "done" and f.get("measured_us")]
    by_size = defaultdict(list)
    for f in done:
        by_size[f["batch"]].append(f)
    print("| batch | runs | estimate p50 / max ms | measured p50 / p99 / max ms | overran | worst overrun ms | start lag p50 / p99 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in sorted(by_size):
        runs = by_size[size]
        est = [f["expected_us"] for f in runs]
        meas = [f["measured_us"] for f in runs]
        over = [f["measured_us"] - f["expected_us"] for f in runs]
        lag = [f["begin_us"] - planned[f["action"]]["earliest_us"]
               for f in runs if f["action"] in planned]
        print(f"| {size} | {len(runs)} | {ms(pct(est, 50))} / {ms(max(est))} "
              f"| {ms(pct(meas, 50))} / {ms(pct(meas, 99))} / {ms(max(meas))} "
              f"| {sum(1 for o in over if o > 0)} | {ms(max(over))} "
              f"| {ms(pct(lag, 50))} / {ms(pct(lag, 99))} |")
    # Batch-1 runs by the idle time before them.
    done.sort(key=lambda f: f["begin_us"])
    buckets = defaultdict(list)
    previous_end = None
    for f in done:
        if previous_end is not None and f["batch"] == 1:
            idle = (f["begin_us"] - previous_end) / 1000
            key = "< 5 ms" if idle < 5 else "5-50 ms" if idle < 50 else "50-500 ms" if idle < 500 else ">= 500 ms"
            buckets[key].append(f["measured_us"])
        previous_end = f["end_us"]
    print()
    print("| idle before a batch-1 run | runs | measured p50 / p99 / max ms |")
    print("| --- | --- | --- |")
    for key in ("< 5 ms", "5-50 ms", "50-500 ms", ">= 500 ms"):
        v = buckets.get(key, [])
        if v:
            print(f"| {key} | {len(v)} | {ms(pct(v, 50))} / {ms(pct(v, 99))} / {ms(max(v))} |")


def device_jobs(lines):
    """The device thread's jobs: wall time, and the time it waited for its core."""
    jobs = [f for m, f in lines if m == "device job"]
    if not jobs:
        return
    wall = sum(f["wall_us"] for f in jobs)
    waited = [f["waited_us"] for f in jobs]
    print()
    print("| device jobs | wall ms | waited for the core ms | share | jobs that waited > 1 ms | waited p99 / max ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| {len(jobs)} | {ms(wall)} | {ms(sum(waited))} | {sum(waited) / max(wall, 1):.1%} "
          f"| {sum(1 for w in waited if w > 1000)} | {ms(pct(waited, 99))} / {ms(max(waited))} |")


def refusals(lines):
    print()
    print("| what | stage / outcome | arrival +ms: submitted | answered or refused | deadline | est. read / decode / respond ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for message, f in lines:
        if message.startswith(("refused", "late")):
            a = f["arrival_us"]
            sub = f.get("submitted_us")
            print(f"| {message} | {f['stage']} | {ms(sub - a) if sub else '-'} "
                  f"| {ms(f['now_us'] - a)} | {ms(f['deadline_us'] - a)} "
                  f"| {ms(f['read_us'])} / {ms(f['decode_us'])} / {ms(f['respond_us'])} |")
        elif message == "answered":
            a = f["arrival_us"]
            print(f"| controller | {f['outcome']} | - | {ms(f['answered_us'] - a)} "
                  f"| {ms(f['slo_us'])} | - |")


def clients(out):
    print()
    print("| requests | answers | client p50 / p99 ms | server (edge) p50 / p99 ms | outside p50 / p99 ms | exec p50 / p99 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for fmt in ("json", "binary"):
        for x in ("0.25", "0.5", "0.8", "1", "1.5", "2"):
            path = os.path.join(out, f"{fmt}-{x}.requests.jsonl")
            if not os.path.exists(path):
                continue
            ok = [json.loads(l) for l in open(path)]
            ok = [r for r in ok if r["status"] == 200 and r["edge_ms"] is not None]
            lat = [r["latency_ms"] for r in ok]
            edge = [r["edge_ms"] for r in ok]
            outside = [r["latency_ms"] - r["edge_ms"] for r in ok]
            ex = [r["exec_ms"] for r in ok if r["exec_ms"] is not None]
            r2 = lambda v: None if v is None else round(v, 1)
            print(f"| {fmt} {x}x | {len(ok)} | {r2(pct(lat, 50))} / {r2(pct(lat, 99))} "
                  f"| {r2(pct(edge, 50))} / {r2(pct(edge, 99))} "
                  f"| {r2(pct(outside, 50))} / {r2(pct(outside, 99))} "
                  f"| {r2(pct(ex, 50))} / {r2(pct(ex, 99))} |")


def main():
    out = sys.argv[1]
    log = os.path.join(out, "server.log")
    phases = os.path.join(out, "phases.txt")
    windows = [("whole run", None)]
    if os.path.exists(phases):
        windows += [(name, (float(a), float(b)))
                    for name, a, b in (l.split() for l in open(phases))]
    for name, window in windows:
        lines = parse(log, window)
        print(f"\n## {name}\n")
        if not lines:
            print("no trace lines in server.log (run.sh --trace)")
            continue
        batches(lines)
        device_jobs(lines)
        if window is not None:
            refusals(lines)
    if glob.glob(os.path.join(out, "*.requests.jsonl")):
        clients(out)


if __name__ == "__main__":
    main()
