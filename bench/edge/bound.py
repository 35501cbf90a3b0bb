#!/usr/bin/env python3
"""The best goodput any scheduler could reach on the edge benchmark's device.

One device that serves one request at a time (batches no cheaper per request, as for
squeezenet on tract), Poisson arrivals, and an admission at arrival that serves the
admitted first come, first served. Nothing late, nothing wasted: upper bounds for the
measured goodput at each rate.

    bench/edge/bound.py CAPACITY [--objective-ms 100] [--allowance-ms 5]
    bench/edge/bound.py --run DIR [--objective-ms 100] [--allowance-ms 5]

With CAPACITY: each request takes exactly 1/capacity, and a clairvoyant admission refuses
exactly the requests that would finish after the objective (less the front-end
allowance); at each multiple of the capacity.

With --run DIR (a `run.sh --out DIR`): the service times are drawn from the run's own
measured runs (`exec_ms` of its answers), at each body's and load's offered rate, beside
the goodput the run measured; and both again on the run's own arrivals (the schedule
client.py drew from its seed, which its report holds: a seed's clusters are the same at
every rate, in units of the mean gap) with run times drawn from the run's, averaged over
20 draws. Two bounds: `clairvoyant` knows each run's time before it
starts; `by p99` counts every request ahead of a newcomer at the 99th percentile of the
run times (a policy that must not be late when a run is slow, as the server's is) and
refuses at a request's start what that estimate says can no longer finish in time. Where
run times spread (a busy host), neither reaches what exact runs would.
"""
import argparse
import collections
import glob
import json
import os
import random

from arrivals import arrival_times

LOADS = ("0.25", "0.5", "0.8", "1", "1.5", "2")


def bound(capacity, load, objective_s, n=200_000, seed=1):
    """Clairvoyant admission, every run exactly 1/capacity seconds."""
    return clairvoyant(arrivals(capacity * load, [1.0 / capacity], n, seed), objective_s)


def arrivals(rate, runs, n, seed=1):
    """`n` Poisson arrivals at `rate` per second, each with a run time drawn from `runs`."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(n):
        t += rng.expovariate(rate)
        # One run time draws nothing: the same arrivals as a constant service.
        out.append((t, runs[0] if len(runs) == 1 else rng.choice(runs)))
    return out


def clairvoyant(stream, objective_s):
    """Admits a request iff, knowing every run time, it finishes within the objective."""
    free = 0.0
    good = 0
    for t, run in stream:
        finish = max(t, free) + run
        if finish - t <= objective_s:
            free = finish
            good += 1
    return good / len(stream)


def by_estimate(stream, objective_s, estimate):
    """Admits a request iff the queue ahead and itself, each at `estimate`, finish within
    the objective; at its start, refuses one the estimate says is too late; a run that
    overruns finishes late (not good)."""
    queue = collections.deque()
    free = 0.0
    good = 0

    def serve_until(now):
        nonlocal free, good
        while queue and free <= now:
            t, run = queue.popleft()
            start = max(free, t)
            if start + estimate - t > objective_s:
                continue
            free = start + run
            good += free - t <= objective_s

    for t, run in stream:
        serve_until(t)
        if max(free, t) + estimate * (len(queue) + 1) - t <= objective_s:
            queue.append((t, run))
    serve_until(float("inf"))
    return good / len(stream)


def schedule(report):
    """The arrival times client.py drew for `report` (its rate, seed, duration and cap on
    requests), or None for a report without its seed."""
    if report.get("seed") is None:
        return None
    return arrival_times(report["rate"], report["seed"], report["duration_s"], report["offered"])


def on_schedule(times, runs, objective_s, p99, draws=20):
    """Both bounds on the run's own arrivals, run times drawn from `runs`, averaged
    over `draws` draws."""
    rng = random.Random(1)
    best = by_p99 = 0.0
    for _ in range(draws):
        stream = [(t, rng.choice(runs)) for t in times]
        best += clairvoyant(stream, objective_s)
        by_p99 += by_estimate(stream, objective_s, p99)
    return best / draws, by_p99 / draws


def measured_runs(run_dir):
    """Run times (s) of every answered request of the run."""
    runs = []
    for path in glob.glob(os.path.join(run_dir, "*.requests.jsonl")):
        with open(path) as f:
            for line in f:
                ms = json.loads(line).get("exec_ms")
                if ms:
                    runs.append(ms / 1e3)
    return sorted(runs)


def from_run(run_dir, objective_s, n=100_000):
    runs = measured_runs(run_dir)
    if not runs:
        raise SystemExit(f"bound.py: no answered requests with exec_ms in {run_dir}")
    p99 = runs[min(len(runs) - 1, int(len(runs) * 0.99))]
    mean = sum(runs) / len(runs)
    print(f"run times: {len(runs)} measured, mean {mean * 1e3:.2f} ms, "
          f"p50 {runs[len(runs) // 2] * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")
    print()
    print("| body | load | rate/s | measured | clairvoyant | by p99 "
          "| its arrivals: clairvoyant | its arrivals: by p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for body in ("json", "binary"):
        for load in LOADS:
            path = os.path.join(run_dir, f"{body}-{load}.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                report = json.load(f)
            rate = report["offered"] / report["duration_s"]
            stream = arrivals(rate, runs, n)
            times = schedule(report)
            own = "- | -"
            if times:
                own = "{:.4f} | {:.4f}".format(*on_schedule(times, runs, objective_s, p99))
            print(f"| {body} | {load}x | {rate:.1f} | {report['goodput']:.4f} | "
                  f"{clairvoyant(stream, objective_s):.4f} | "
                  f"{by_estimate(stream, objective_s, p99):.4f} | {own} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capacity", type=float, nargs="?",
                        help="answers per second, as run.sh measured")
    parser.add_argument("--run", help="a run.sh --out directory: its own run times and rates")
    parser.add_argument("--objective-ms", type=float, default=100.0)
    parser.add_argument("--allowance-ms", type=float, default=5.0,
                        help="front-end time kept off the objective")
    args = parser.parse_args()
    objective = (args.objective_ms - args.allowance_ms) / 1e3
    if args.run:
        from_run(args.run, objective)
        return
    if args.capacity is None:
        parser.error("give CAPACITY or --run DIR")
    print("| load | best goodput | served / capacity |")
    print("| --- | --- | --- |")
    for load in (0.25, 0.5, 0.8, 1.0, 1.5, 2.0):
        g = bound(args.capacity, load, objective)
        print(f"| {load}x | {g:.4f} | {g * load:.3f} |")


if __name__ == "__main__":
    main()
