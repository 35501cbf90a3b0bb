#!/usr/bin/env python3
"""Open-loop Poisson client for the KServe V2 inference route, as an outside user runs it.

A separate process that knows nothing of clockwork's code: it reads the model's metadata
(GET /v2/models/<model>), builds one request body (JSON tensors, Triton's binary tensor
extension, or `shm`: the input written once into a POSIX shared-memory object that this
client registers as a region, Triton's system shared-memory extension, the request naming
it and the output coming back as binary data), then sends requests at Poisson arrival times whatever the server answers
(open loop), for `--duration` seconds, at most `--max-requests` of them and at most
`--max-in-flight` outstanding (one more than that is counted `client_overflow`, never
queued: queueing would close the loop). Only 127.0.0.1 may be targeted.

Every latency is measured here, from the moment the request is handed to the connection
to the moment the whole answer is read. Printed as JSON:
  offered, answered, goodput (answered 200 within the objective / offered), good, late
  (200 after the objective), refused (by error_type) with p50/p99 of their latency,
  errors (other HTTP statuses, connection failures), p50/p99 of successes; this client's
  own CPU (client_cpu_s) and garbage-collection pauses (client_gc_pauses) over the
  schedule, during which Python's cyclic collector is off.
"""

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from urllib.parse import urlparse

import aiohttp
import numpy as np

from arrivals import arrival_times

# A refusal is the server saying "not now" (503 or 429), whatever error_type it names;
# any other non-200 status is an error.
REFUSAL_STATUSES = {429, 503}


def percentile(values, q):
    if not values:
        return None
    return round(float(np.percentile(np.array(values), q)), 3)


def build_body(meta, fmt, seed, regions=None):
    """One request body of batch 1 for every input of the model, with random values;
    for `shm`, each input written into a region of `regions` (a `Regions`)."""
    rng = np.random.default_rng(seed)
    tensors, blobs = [], []
    for spec in meta["inputs"]:
        shape = [1 if d < 0 else d for d in spec["shape"]]
        if spec["datatype"] != "FP32":
            sys.exit(f"input {spec['name']}: only FP32 inputs are supported here")
        data = rng.standard_normal(int(np.prod(shape))).astype(np.float32)
        tensor = {"name": spec["name"], "shape": shape, "datatype": "FP32"}
        if fmt == "json":
            tensor["data"] = [round(float(v), 5) for v in data]
        elif fmt == "shm":
            tensor["parameters"] = regions.place(spec["name"], data.tobytes())
        else:
            raw = data.tobytes()
            tensor["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        tensors.append(tensor)
    request = {"inputs": tensors}
    if fmt == "json":
        return json.dumps(request).encode(), {"Content-Type": "application/json"}
    if fmt == "shm":
        request["parameters"] = {"binary_data_output": True}
        return json.dumps(request).encode(), {"Content-Type": "application/json"}
    request["outputs"] = [
        {"name": o["name"], "parameters": {"binary_data": True}} for o in meta["outputs"]
    ]
    header = json.dumps(request).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + b"".join(blobs), headers


class Regions:
    """The shared-memory objects of the `shm` body: one per input, written once, each
    registered as a region of its whole length (its name the input's); removed, and
    unregistered, by `close`."""

    def __init__(self, base, session):
        self.base, self.session = base, session
        self.pending, self.made = [], []

    def place(self, name, raw):
        key = f"/clockwork-edge-{os.getpid()}-{len(self.made)}"
        with open(f"/dev/shm{key}", "wb") as f:
            f.write(raw)
        region = f"edge-{os.getpid()}-{name}"
        self.made.append((region, key))
        self.pending.append((region, key, len(raw)))
        return {"shared_memory_region": region, "shared_memory_byte_size": len(raw)}

    async def register(self):
        for region, key, size in self.pending:
            route = f"{self.base}/v2/systemsharedmemory/region/{region}/register"
            async with self.session.post(route, json={"key": key, "byte_size": size}) as r:
                if r.status != 200:
                    sys.exit(f"register {region}: HTTP {r.status}: {await r.text()}")
        self.pending = []

    async def close(self):
        for region, key in self.made:
            route = f"{self.base}/v2/systemsharedmemory/region/{region}/unregister"
            async with self.session.post(route) as r:
                await r.read()
            os.unlink(f"/dev/shm{key}")


class Tally:
    def __init__(self, objective_s):
        self.objective_s = objective_s
        self.offered = 0
        self.ok_latency = []
        self.late = 0
        # Late answers the server itself held past the objective (its Server-Timing
        # `edge` duration); the rest lost their time outside it (network, this client).
        self.late_in_server = 0
        self.refused = {}
        self.refused_latency = []
        self.errors = {}
        self.overflow = 0
        # Per request (`--log`): when it was sent, its answer, and the server's timings.
        self.log = None
        self.start = time.perf_counter()

    def record(self, status, error_type, latency, server_ms=None):
        if status == 200:
            self.ok_latency.append(latency * 1e3)
            if latency > self.objective_s:
                self.late += 1
                if server_ms is not None and server_ms > self.objective_s * 1e3:
                    self.late_in_server += 1
        elif status in REFUSAL_STATUSES:
            self.refused[error_type] = self.refused.get(error_type, 0) + 1
            self.refused_latency.append(latency * 1e3)
        else:
            key = f"{status}:{error_type}"
            self.errors[key] = self.errors.get(key, 0) + 1

    def report(self, args, unanswered):
        good = sum(1 for v in self.ok_latency if v <= self.objective_s * 1e3)
        report = {
            "model": args.model,
            "format": args.format,
            "rate": args.rate,
            "seed": args.seed,
            "duration_s": args.duration,
            "objective_ms": args.objective_ms,
            "offered": self.offered,
            "good": good,
            "goodput": round(good / self.offered, 4) if self.offered else None,
            "late": self.late,
            "late_in_server": self.late_in_server,
            "refused": sum(self.refused.values()),
            "refused_by_type": self.refused,
            "refused_p50_ms": percentile(self.refused_latency, 50),
            "refused_p99_ms": percentile(self.refused_latency, 99),
            "errors": self.errors,
            "client_overflow": self.overflow,
            "unanswered": unanswered,
            "ok_p50_ms": percentile(self.ok_latency, 50),
            "ok_p99_ms": percentile(self.ok_latency, 99),
        }
        if self.log is not None:
            report["log"] = self.log
        return report


def server_timing_ms(response, metric):
    """The `metric` duration of the answer's Server-Timing header, in ms, or None."""
    for part in response.headers.get("Server-Timing", "").split(","):
        name, _, rest = part.strip().partition(";dur=")
        if name == metric:
            try:
                return float(rest)
            except ValueError:
                return None
    return None


class Pauses:
    """This process's garbage-collection pauses of at least 1 ms, each as (when, from the
    schedule's start, in s; how long, in ms; the generation collected): a pause holds
    every answer this client has yet to read, and counts as time outside the server."""

    def __init__(self, start):
        self.start = start
        self.began = None
        self.pauses = []

    def __call__(self, phase, info):
        now = time.perf_counter()
        if phase == "start":
            self.began = now
        elif self.began is not None and now - self.began >= 1e-3:
            self.pauses.append((round(self.began - self.start, 4),
                                round((now - self.began) * 1e3, 2), info["generation"]))


class Phases:
    """When each step of one request happened, as aiohttp's tracing reports them
    (perf_counter seconds): `connect` and `connected` only when the request opened a new
    connection, `head_sent` when its head was written, `answer_head` when the answer's
    head was read. Between `head_sent` and `answer_head`, the server held the request for
    its Server-Timing `edge`; the rest of that interval is the request's bytes waiting
    before the server read its head and the answer's after the server encoded it (and
    this client's own delay in reading it)."""

    @staticmethod
    def config():
        trace = aiohttp.TraceConfig()

        def at(field):
            async def mark(session, ctx, params):
                if ctx.trace_request_ctx is not None:
                    ctx.trace_request_ctx[field] = time.perf_counter()
            return mark

        trace.on_connection_create_start.append(at("connect"))
        trace.on_connection_create_end.append(at("connected"))
        trace.on_request_headers_sent.append(at("head_sent"))
        trace.on_request_end.append(at("answer_head"))
        return trace

    @staticmethod
    def fields(marks, begin):
        """The marks as milliseconds from the request's start, for its log line."""
        return {f"{k}_ms": round((v - begin) * 1e3, 3) for k, v in marks.items()}


async def one(session, url, body, headers, tally):
    begin = time.perf_counter()
    marks = {}
    try:
        async with session.post(url, data=body, headers=headers,
                                trace_request_ctx=marks) as response:
            payload = await response.read()
            latency = time.perf_counter() - begin
            error_type = None
            if response.status != 200:
                try:
                    error_type = json.loads(payload).get("error_type")
                except ValueError:
                    error_type = "unparsable"
            edge_ms = server_timing_ms(response, "edge")
            tally.record(response.status, error_type, latency, edge_ms)
            if tally.log is not None:
                tally.log.append({
                    "sent_s": round(begin - tally.start, 6),
                    "status": response.status,
                    "error_type": error_type,
                    "latency_ms": round(latency * 1e3, 3),
                    "edge_ms": edge_ms,
                    "exec_ms": server_timing_ms(response, "exec"),
                    **Phases.fields(marks, begin),
                })
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        key = f"connection:{type(e).__name__}"
        tally.errors[key] = tally.errors.get(key, 0) + 1


async def run(args):
    base = args.url.rstrip("/")
    if urlparse(base).hostname != "127.0.0.1":
        sys.exit("only 127.0.0.1 may be targeted")
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    traces = [Phases.config()] if args.log else []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     trace_configs=traces) as session:
        async with session.get(f"{base}/v2/models/{args.model}") as response:
            if response.status != 200:
                sys.exit(f"model metadata: HTTP {response.status}: {await response.text()}")
            meta = await response.json()
        regions = Regions(base, session)
        body, headers = build_body(meta, args.format, args.seed, regions)
        await regions.register()
        try:
            return await schedule(args, session, base, body, headers)
        finally:
            await regions.close()


async def schedule(args, session, base, body, headers):
    """The run itself, once the body is built (see the module's doc)."""
    url = f"{base}/v2/models/{args.model}/infer"
    tally = Tally(args.objective_ms / 1e3)
    if args.log:
        tally.log = []
    if args.until_ok:
        return await until_ok(args, session, url, body, headers, tally)
    if args.closed_loop:
        return await closed_loop(args, session, url, body, headers, tally)
    await warm_up(session, base, url, body, headers, args.warm_connections)
    # The cyclic collector stays out of the schedule: a full collection here stopped
    # this client for 15-43 ms at a time (every answer due meanwhile read late, every
    # arrival sent late), a stall of the instrument counted against the server. What
    # the setup made is frozen out of later collections; the schedule's cycles wait.
    gc.collect()
    gc.freeze()
    gc.disable()
    tally.start = time.perf_counter()
    # This process's CPU over the schedule: on this machine it shares the front-end
    # core with the server, and what it takes the server does not have.
    cpu_before = time.process_time()
    pauses = Pauses(tally.start)
    gc.callbacks.append(pauses)
    arrivals = arrival_times(args.rate, args.seed, args.duration, args.max_requests)
    tasks = set()
    start = time.perf_counter()
    for next_at in arrivals:
        delay = start + next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tally.offered += 1
        if len(tasks) >= args.max_in_flight:
            tally.overflow += 1
        else:
            task = asyncio.create_task(one(session, url, body, headers, tally))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    unanswered = 0
    if tasks:
        _, pending = await asyncio.wait(set(tasks), timeout=args.request_timeout)
        unanswered = len(pending)
        for task in pending:
            task.cancel()
    report = tally.report(args, unanswered)
    report["client_cpu_s"] = round(time.process_time() - cpu_before, 3)
    gc.callbacks.remove(pauses)
    gc.enable()
    report["client_gc_pauses"] = pauses.pauses
    return report


async def warm_up(session, base, url, body, headers, connections):
    """This client's own start, before the schedule and not counted: `connections`
    keep-alive connections opened at once (a GET of the liveness route each), then one
    request of the body, answered or not. Without it the first arrivals paid for this
    client's first connections and first requests of its own code (their answers were
    read 10-80 ms after the server sent them, against 1-2 ms after the first 0.2 s), on
    the core the server's front end shares with it."""
    if connections <= 0:
        return
    async def live():
        async with session.get(f"{base}/v2/health/live") as response:
            await response.read()
    try:
        await asyncio.gather(*(live() for _ in range(connections)))
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        sys.exit(f"warm-up: {type(e).__name__}: {e}")
    await asyncio.sleep(0.2)


async def until_ok(args, session, url, body, headers, tally):
    """Warm-up: one request at a time, 100 ms apart, until one is answered 200 or
    `--duration` seconds pass (a server may refuse a model that no device holds yet)."""
    end = time.perf_counter() + args.duration
    while time.perf_counter() < end and not tally.ok_latency:
        tally.offered += 1
        await one(session, url, body, headers, tally)
        await asyncio.sleep(0.1)
    return tally.report(args, 0)


async def closed_loop(args, session, url, body, headers, tally):
    """Capacity probe: `--closed-loop N` clients, each sending its next request when its
    last is answered, for `--duration` seconds; adds `ok_per_s` to the report."""
    end = time.perf_counter() + args.duration

    async def client():
        while time.perf_counter() < end:
            tally.offered += 1
            await one(session, url, body, headers, tally)

    begin = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(args.closed_loop)))
    report = tally.report(args, 0)
    report["closed_loop"] = args.closed_loop
    report["ok_per_s"] = round(len(tally.ok_latency) / (time.perf_counter() - begin), 2)
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="http://127.0.0.1:PORT")
    parser.add_argument("--model", required=True)
    parser.add_argument("--rate", type=float, default=1.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of arrivals")
    parser.add_argument("--objective-ms", type=float, default=100.0)
    parser.add_argument("--format", choices=["json", "binary", "shm"], default="json")
    parser.add_argument("--max-requests", type=int, default=20000)
    parser.add_argument("--max-in-flight", type=int, default=2000)
    parser.add_argument("--request-timeout", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--warm-connections", type=int, default=16,
        help="open loop: connections opened, and one request sent, before the schedule (0: none)",
    )
    parser.add_argument("--out", help="write the JSON here too")
    parser.add_argument(
        "--log",
        help="one JSON line per answered request: sent_s, status, latency, Server-Timing, "
        "and its steps as aiohttp traces them (Phases)",
    )
    parser.add_argument(
        "--until-ok", action="store_true", help="warm-up: until the first 200, one at a time"
    )
    parser.add_argument(
        "--closed-loop", type=int, default=0, help="N clients back to back instead (capacity)"
    )
    args = parser.parse_args()
    if args.rate <= 0 or args.duration <= 0:
        sys.exit("--rate and --duration must be positive")
    report = asyncio.run(run(args))
    log = report.pop("log", None)
    if args.log and log is not None:
        with open(args.log, "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in log)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
