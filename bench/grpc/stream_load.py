#!/usr/bin/env python3
"""Open-loop Poisson load over one gRPC stream (`ModelStreamInfer`), through the stubs of
Triton's own Python package (`tritonclient.grpc.service_pb2_grpc`): does every request
get exactly one answer, in time or refused, as the client sees it?

    python bench/grpc/stream_load.py --url 127.0.0.1:8001 --model squeezenet --rate 600

Each request carries its own id, stamped here when it is handed to the stream and when
its answer is read (an error answer names its request in `infer_response`, which
tritonclient's own stream callback drops: hence the stubs). Prints (and with `--out`
writes) the JSON report of `bench/edge/client.py`, whose fields `bench/edge/table.py` and
`compare.py` read: offered, good, goodput, late (outputs after the objective), refused (by
`error_type`) with the p50/p99 of their latency, unanswered (no answer within `--grace`
seconds after the last was sent), duplicates (a second answer for an id), p50/p99 of the
outputs' latency; `late_in_server` is not known (a stream's messages carry no
Server-Timing). `--log` writes one JSON line per answered request. The edge bench runs it
as its `grpc` body (`bench/edge/run.sh --formats grpc`).
"""

import argparse
import json
import queue
import sys
import threading
import time

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/edge")
from arrivals import arrival_times  # noqa: E402


def percentile(values, q):
    return round(float(np.percentile(values, q)), 3) if values else None


def request_for(stub, model):
    """A request of one item of zeros for every input of the model (FP32 only)."""
    meta = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=model))
    request = service_pb2.ModelInferRequest(model_name=model)
    for spec in meta.inputs:
        if spec.datatype != "FP32":
            sys.exit(f"input {spec.name}: only FP32 inputs are supported here")
        shape = [1 if d < 0 else d for d in spec.shape]
        request.inputs.add(name=spec.name, datatype="FP32", shape=shape)
        request.raw_input_contents.append(np.zeros(shape, dtype=np.float32).tobytes())
    return request


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--objective-ms", type=float, default=100.0)
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--out", help="write the JSON report here too")
    parser.add_argument("--log", help="one JSON line per answered request")
    args = parser.parse_args()

    channel = grpc.insecure_channel(args.url, options=[
        ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    template = request_for(stub, args.model)
    outgoing = queue.Queue()
    sent = {}

    def requests():
        while (request := outgoing.get()) is not None:
            sent[request.id] = time.perf_counter()
            yield request

    got = []
    answers = stub.ModelStreamInfer(requests())
    reader = threading.Thread(
        target=lambda: got.extend((time.perf_counter(), a) for a in answers), daemon=True)
    reader.start()
    schedule = arrival_times(args.rate, args.seed, args.duration, 10**9)
    cpu_before = time.process_time()
    start = time.perf_counter()
    for i, at in enumerate(schedule):
        delay = start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        request = service_pb2.ModelInferRequest()
        request.CopyFrom(template)
        request.id = f"r-{i}"
        outgoing.put(request)
    deadline = time.perf_counter() + args.grace
    while len(got) < len(schedule) and time.perf_counter() < deadline:
        time.sleep(0.05)
    outgoing.put(None)
    reader.join(timeout=args.grace)
    result, log = report(args, len(schedule), sent, list(got), start)
    result["client_cpu_s"] = round(time.process_time() - cpu_before, 3)
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    if args.log:
        with open(args.log, "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in log)


def report(args, offered, sent, got, start):
    """The report in `bench/edge/client.py`'s fields, and the per-request log."""
    seen, duplicates, log = set(), 0, []
    ok_ms, refused_ms, refused_by = [], [], {}
    for at, answer in got:
        request_id = answer.infer_response.id
        if request_id in seen:
            duplicates += 1
            continue
        seen.add(request_id)
        latency = (at - sent[request_id]) * 1e3
        kind = None
        if answer.error_message:
            kind = answer.infer_response.parameters["error_type"].string_param
            refused_by[kind] = refused_by.get(kind, 0) + 1
            refused_ms.append(latency)
        else:
            ok_ms.append(latency)
        log.append({"sent_s": round(sent[request_id] - start, 6), "status": 503 if kind else 200,
                    "error_type": kind, "latency_ms": round(latency, 3)})
    good = sum(1 for v in ok_ms if v <= args.objective_ms)
    result = {
        "model": args.model,
        "format": "grpc",
        "rate": args.rate,
        "seed": args.seed,
        "duration_s": args.duration,
        "objective_ms": args.objective_ms,
        "offered": offered,
        "good": good,
        "goodput": round(good / offered, 4) if offered else None,
        "late": len(ok_ms) - good,
        "late_in_server": None,
        "refused": len(refused_ms),
        "refused_by_type": refused_by,
        "refused_p50_ms": percentile(refused_ms, 50),
        "refused_p99_ms": percentile(refused_ms, 99),
        "errors": {"duplicate": duplicates} if duplicates else {},
        "client_overflow": 0,
        "unanswered": offered - len(seen),
        "ok_p50_ms": percentile(ok_ms, 50),
        "ok_p99_ms": percentile(ok_ms, 99),
    }
    return result, log


if __name__ == "__main__":
    main()
