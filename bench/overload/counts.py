#!/usr/bin/env python3
"""The burst's answers as the server counted them against those its client received.

    counts.py METRICS_BEFORE METRICS_AFTER SERVER_TIMING_JSON

METRICS_*: the server's /metrics text before and after the burst; SERVER_TIMING_JSON: the
load generator's server_timing.json (each model's answers by kind, as received). Prints
the answers the server counted (every model's `clockwork_requests` and every pipeline's
`clockwork_pipeline_requests`, less the pipeline stages' sub-requests, which are in their
model's count but no client sent), those the client received, and the difference; then
each model's and pipeline's own counts (a model that serves a pipeline stage includes its
sub-requests). The server counts each request once, by the answer it gave
(src/tally.rs), so the difference is the answers the client did not read (its own
timeout): a difference above that is requests counted twice.
"""
import collections
import json
import re
import sys


def read(path):
    """Answers by model or pipeline, and the pipeline stages' sub-requests, from /metrics."""
    counts, sub_requests = collections.Counter(), 0.0
    for line in open(path):
        m = re.match(r"clockwork_(requests|pipeline_requests|pipeline_stage_requests)\{(.*)\} (\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2]))
        value = float(m[3])
        if m[1] == "requests":
            counts[labels["model"]] += value
        elif m[1] == "pipeline_requests":
            counts[labels["pipeline"]] += value
        else:
            sub_requests += value
    return counts, sub_requests


def received(path):
    """Answers by model as the load generator read them."""
    models = json.load(open(path)).get("models", {})
    counts = {}
    for model, kinds in models.items():
        total = kinds.get("successes", {}).get("count", 0)
        total += sum(r.get("count", 0) for r in kinds.get("refusals", {}).values())
        counts[model] = total
    return counts


def main():
    before, after, timing = sys.argv[1:4]
    (server, subs), (server_before, subs_before) = read(after), read(before)
    server.subtract(server_before)
    client = received(timing)
    counted = int(sum(server.values()) - (subs - subs_before))
    got = sum(client.values())
    each = {m: [int(server.get(m, 0)), client.get(m, 0)] for m in sorted(set(server) | set(client))}
    print("burst, answers counted by the server / received by the client:",
          json.dumps({"server": counted, "client": got, "difference": counted - got}),
          "each [server, client]:", json.dumps({m: v for m, v in each.items() if any(v)}))


if __name__ == "__main__":
    main()
