#!/usr/bin/env python3
"""The best goodput any scheduler could reach on the edge benchmark's device.

One device that serves one request at a time in exactly 1/capacity seconds (batches no
cheaper per request, as for squeezenet on tract), Poisson arrivals at each multiple of
the capacity, and a clairvoyant admission that refuses, on arrival, exactly the requests
that would finish after the objective (less the given front-end allowance) and serves the
rest first come, first served. Nothing late, nothing wasted: an upper bound for the
measured goodput at each rate.

    bench/edge/bound.py CAPACITY [--objective-ms 100] [--allowance-ms 5]
"""
import argparse
import random


def bound(capacity, load, objective_s, n=200_000, seed=1):
    rng = random.Random(seed)
    service = 1.0 / capacity
    t = free = 0.0
    good = 0
    for _ in range(n):
        t += rng.expovariate(capacity * load)
        start = max(t, free)
        if start + service - t <= objective_s:
            free = start + service
            good += 1
    return good / n


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capacity", type=float, help="answers per second, as run.sh measured")
    parser.add_argument("--objective-ms", type=float, default=100.0)
    parser.add_argument("--allowance-ms", type=float, default=5.0,
                        help="front-end time kept off the objective")
    args = parser.parse_args()
    objective = (args.objective_ms - args.allowance_ms) / 1e3
    print("| load | best goodput | served / capacity |")
    print("| --- | --- | --- |")
    for load in (0.25, 0.5, 0.8, 1.0, 1.5, 2.0):
        g = bound(args.capacity, load, objective)
        print(f"| {load}x | {g:.4f} | {g * load:.3f} |")


if __name__ == "__main__":
    main()
