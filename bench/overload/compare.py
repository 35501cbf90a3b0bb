#!/usr/bin/env python3
"""Puts overload runs side by side: what `bench/overload/run.sh` printed, saved to a file
per run, one column per run.

    bench/overload/compare.py NAME=FILE [NAME=FILE ...]

Rows: the capacity it measured; the burst's answers in time, late at the client (and of
them those the server itself sent after the deadline from the edge), refused
(and of them `timed_out` and `overran`, the refusals that waited, and the three buckets of
the burst whose requests had most of them); the answers' time inside
the server (Server-Timing) at p50 and p99; refusal latency p50 and
p99 at the client, a `deadline_unreachable` refusal's p50 and p99 at the client and its p99
inside the server (all,
and by model where the load generator split them, with each model's `overran` refusals'
time in the server); the
CPU seconds of the devices' threads and of the rest over the burst (and the rest by
thread name); the largest
RSS; the first second after the burst (in time of offered); the refusals at the edge by
stage (all models); each model's answers in time and `timed_out` during the burst; and,
where the run printed its batches (`bench/overload/batches.py`), each model's device
seconds and device time per item; where it counted them (`--syscalls`), the HTTP workers'
`write` and `recvfrom` calls and CPU microseconds per response sent.
"""
import json
import re
import sys


def line(text, prefix):
    """The JSON object printed after `prefix` (a regular expression) at the start of a
    line."""
    m = re.search(r"^" + prefix + r"(\{.*\})$", text, re.M)
    if not m:
        raise SystemExit(f"no line starting {prefix!r}")
    return json.loads(m.group(1))


def server_timing(text):
    """The Server-Timing summary the load generator wrote (a JSON object over lines)."""
    mark = "server-side time (Server-Timing edge): "
    at = text.index(mark) + len(mark)
    return json.JSONDecoder().raw_decode(text[at:])[0]


def by_model(timing, outcome, quantiles):
    """Each model's refusals of `outcome` in the server: its p99, or its count and the
    quantiles, where the load generator split them by model."""
    cells = []
    for name, kinds in sorted(timing.get("models", {}).items()):
        split = kinds["refusals"].get(outcome) or {}
        if not split.get("server_ms"):
            continue
        times = " / ".join(str(split["server_ms"][q]) for q in quantiles)
        cells.append(f"{name} {times}" if len(quantiles) == 1
                     else f"{name} {split['count']}, {times}")
    return ", ".join(cells) or "-"


def models(text):
    """Each model's burst counts: {model: {outcome: n}}."""
    out = {}
    for m in re.finditer(r"^burst, (\w+): (\{.*\})$", text, re.M):
        counts = json.loads(m.group(2).replace("'", '"'))
        out[m.group(1)] = counts
    return out


def batches(text):
    """Each model's device seconds and milliseconds an item over the burst, from the
    `burst batches` lines: {model: (seconds, ms_per_item)}."""
    out = {}
    pattern = r"^burst batches, (\w+): .*?device ([\d.]+) s, ([\d.]+) ms an item"
    for m in re.finditer(pattern, text, re.M):
        out[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return out


def waited_by_arrival(text):
    """The three buckets of most `timed_out` and `overran` refusals by arrival, from the
    `burst, timed_out and overran by arrival` line ("-" where the run has none)."""
    m = re.search(r"^burst, timed_out and overran by arrival \(bucket start s: count\): (\{.*\})$", text, re.M)
    if not m:
        return "-"
    top = sorted(json.loads(m.group(1)).items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{t}: {n}" for t, n in top) or "none"


def column(path):
    text = open(path).read()
    burst = line(text, "burst: ")
    during = line(text, "during the burst: ")
    after = line(text, r"second 1 after \(0\.5x, \d+/s\): ")
    threads = during["server_cpu_by_thread"]
    # The devices' threads, and the rest: HTTP workers, controller, executors (named
    # threads since the executor moved to its device's core; before, all "actix-rt|system").
    # tract's or ONNX Runtime's device threads (`backend = "auto"` runs either).
    device_threads = ("cpu-device-N", "ort-device-N")
    devices = round(sum(threads.get(k, 0) for k in device_threads), 2)
    others = {k: v for k, v in threads.items() if k not in device_threads and v >= 0.05}
    rest = sum(others.values())
    timing = server_timing(text)
    unreachable = timing["refusals"].get("deadline_unreachable", {})
    answered = timing.get("successes", {}).get("server_ms", {})
    per_model = models(text)
    refused_by = burst["refused_by"]
    row = {
        "capacity (answers/s)": re.search(r"^capacity: (\S+)", text, re.M).group(1),
        "in time": burst["ok_in_slo"],
        "late at the client": burst["late"],
        # Sent by the server after the deadline counted from the edge ("-": none, or a run
        # from before the bench printed them).
        "of them late leaving the server": sum(
            c.get("late_at_edge", 0) for c in per_model.values()) or "-",
        "answers' p50 / p99 ms inside the server":
            f"{answered.get('p50', '-')} / {answered.get('p99', '-')}",
        "refused": burst["refused"],
        "of them timed_out / overran":
            f"{refused_by.get('timed_out', 0)} / {refused_by.get('overran', 0)}",
        # Where the run printed them (since the forty-second session): the buckets (a
        # sixtieth of the burst) whose requests waited for the most such refusals.
        "of them by arrival, most (bucket s: n)": waited_by_arrival(text),
        "refusal p50 / p99 ms (client)": f"{burst['refusal_p50_ms']} / {burst['refusal_p99_ms']}",
        # Refusals at arrival alone, at the client: the report's refusal percentiles also
        # hold those refused after waiting.
        "deadline_unreachable p50 / p99 ms (client)":
            f"{unreachable.get('client_ms', {}).get('p50', '-')} / "
            f"{unreachable.get('client_ms', {}).get('p99', '-')}",
        "deadline_unreachable p99 ms (server)": unreachable.get("server_ms", {}).get("p99", "-"),
        # By model, where the load generator split them (since the thirty-seventh session).
        "of it by model": by_model(timing, "deadline_unreachable", ("p99",)),
        "overran: count, p50 / p99 ms (server), by model": by_model(
            timing, "overran", ("p50", "p99")),
        "CPU s: devices / the rest": f"{devices} / {round(rest, 2)}",
        "CPU s of the rest, by thread": ", ".join(f"{k} {v}" for k, v in sorted(others.items())),
        "RSS max MiB": during["rss_mib_max"],
        "first second after": f"{after['ok_in_slo']} of {after['offered']}",
    }
    calls = re.search(r"^http workers, 3 s of the burst: (.*)$", text, re.M)
    if calls:
        c = json.loads(calls.group(1))
        row["http: write / recvfrom per response, CPU µs per response"] = (
            f"{c['write_per_response']} / {c['recvfrom_per_response']}, {c['cpu_us_per_response']}")
    stages = {}
    for counts in per_model.values():
        for kind, n in counts.items():
            if kind.startswith("edge_"):
                stages[kind[5:]] = stages.get(kind[5:], 0) + n
    row["refused at the edge, by stage"] = ", ".join(
        f"{k} {v}" for k, v in sorted(stages.items())) or "-"
    for model, counts in sorted(per_model.items()):
        if "ok" in counts or "timed_out" in counts:
            in_time, timed_out = counts.get("ok", 0), counts.get("timed_out", 0)
            row[f"{model}: in time / timed_out"] = f"{in_time} / {timed_out}"
    for model, (seconds, per_item) in sorted(batches(text).items()):
        row[f"{model}: device s (ms an item)"] = f"{seconds} ({per_item})"
    return row


def main():
    runs = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not runs or any(len(r) != 2 for r in runs):
        raise SystemExit(__doc__)
    columns = [(name, column(path)) for name, path in runs]
    keys = []
    for _, col in columns:
        keys += [k for k in col if k not in keys]
    print("| | " + " | ".join(name for name, _ in columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for key in keys:
        print(f"| {key} | " + " | ".join(str(col.get(key, "-")) for _, col in columns) + " |")


if __name__ == "__main__":
    main()
