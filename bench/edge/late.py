#!/usr/bin/env python3
"""Where each run's answers late at the client lost their time: for runs of `run.sh`
(client.py's per-request logs, `<body>-<x>.requests.jsonl`, and its reports), per run
the answers late at the client, of them those the server itself held past the objective
(its `Server-Timing: edge` over it), those the client read during or right after one of
its own garbage-collection pauses while the request was out (`client_gc_pauses`: a
pause between its sending and its reading delays one or the other), those it sent in the
first 0.2 s of a rate, those that opened a connection of their own and would have been in
time without the client's connecting before their head went out (client.py's
`connect_ms`/`head_sent_ms`; a refusal that leaves its body unread closes its
connection, so the next request on it connects again), and the rest, with the largest time the server said it
held one of those (how close to the objective it let them go) and the largest time one of
them spent outside the server after its head was written (from `head_sent_ms` to
`answer_head_ms`, less the server's `edge`: its bytes waiting for the server to read its
head, and the answer's after it was encoded until this client read its head).

    bench/edge/late.py NAME=DIR [NAME=DIR ...]
"""
import json
import os
import sys

from compare import LOADS

OBJECTIVE_MS = 100.0


def late_answers(out):
    """Each late answer of a run as (read at, s from its rate's start; the request's log
    line; the rate's pauses)."""
    for body in ("json", "binary"):
        for load in LOADS:
            base = f"{out}/{body}-{load}"
            if not os.path.exists(f"{base}.requests.jsonl"):
                continue
            report = json.load(open(f"{base}.json"))
            objective = report.get("objective_ms", OBJECTIVE_MS)
            pauses = report.get("client_gc_pauses")
            for line in open(f"{base}.requests.jsonl"):
                r = json.loads(line)
                if r["status"] == 200 and r["latency_ms"] > objective:
                    yield r["sent_s"] + r["latency_ms"] / 1e3, r, objective, pauses


def by_connecting(r, objective):
    """Whether a late answer was late only by the client's own connecting: it opened a
    connection, and from its head written to its answer read took no more than the
    objective."""
    return "connect_ms" in r and r["latency_ms"] - r["head_sent_ms"] <= objective


def row(name, out):
    counts = {"late": 0, "in_server": 0, "pause": 0, "connecting": 0, "start": 0, "rest": 0}
    closest = None
    outside = None
    recorded = True
    phases = True
    for read_at, r, objective, pauses in late_answers(out):
        counts["late"] += 1
        edge = r.get("edge_ms")
        if pauses is None:
            recorded = False
        if edge is not None and edge > objective:
            counts["in_server"] += 1
        elif any(r["sent_s"] <= at + ms / 1e3 and at <= read_at for at, ms, _ in pauses or []):
            counts["pause"] += 1
        elif by_connecting(r, objective):
            counts["connecting"] += 1
        elif r["sent_s"] < 0.2:
            counts["start"] += 1
        else:
            counts["rest"] += 1
            if edge is not None:
                closest = max(closest or 0.0, edge)
            if "answer_head_ms" not in r:
                phases = False
            elif edge is not None:
                gap = r["answer_head_ms"] - r.get("head_sent_ms", 0.0) - edge
                outside = max(outside or 0.0, gap)
    pause = counts["pause"] if recorded else "not recorded"
    connecting = counts["connecting"] if phases else "not recorded"
    held = f"{closest:.2f}" if closest is not None else "-"
    out = f"{outside:.2f}" if outside is not None else "-"
    return (f"| {name} | {counts['late']} | {counts['in_server']} | {pause} | "
            f"{counts['start']} | {connecting} | {counts['rest']} | {held} | {out} |")


def main(argv):
    if not argv:
        sys.exit(__doc__)
    print("| run | late at the client | held late by the server | out during a client pause "
          "| sent in a rate's first 0.2 s | late by the client's own connecting | the rest "
          "| the rest's largest server time (ms) | the rest's largest time outside after "
          "the head was written (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for arg in argv:
        name, _, out = arg.partition("=")
        print(row(name, out))


if __name__ == "__main__":
    main(sys.argv[1:])
