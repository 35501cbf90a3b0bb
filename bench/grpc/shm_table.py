#!/usr/bin/env python3
"""The table of `bench/grpc/shm.sh`'s runs: for each run (mode and round), throughput and
p99 at each concurrency (perf_analyzer's CSV), and per request the server answered over
the run: the server's CPU outside its devices' threads (the front end) and perf_analyzer's
own CPU.

    bench/grpc/shm_table.py DIR
"""
import csv
import json
import pathlib
import sys

MODES = {
    "http": "HTTP, tensors in the body (binary)",
    "http-shm": "HTTP, tensors in shared memory",
    "grpc": "gRPC, tensors in the message",
    "grpc-shm": "gRPC, tensors in shared memory",
}


def row(out, name):
    mode, round_ = name.rsplit("-", 1)
    levels = {}
    csv_path = out / f"{name}.csv"
    if csv_path.exists():
        for line in csv.DictReader(open(csv_path)):
            p99 = float(line["p99 latency"]) / 1000
            levels[int(line["Concurrency"])] = f"{float(line['Inferences/Second']):.1f}, {p99:.2f} ms"
    answered = int((out / f"{name}.answered").read_text())
    server = json.loads((out / f"{name}.cpu.json").read_text())
    front = sum(v for k, v in server.items() if "device" not in k)
    user, system = map(float, (out / f"{name}.time").read_text().split()[-2:])
    per = lambda seconds: f"{seconds / answered * 1e6:.0f}" if answered else "-"
    return f"{MODES[mode]} ({round_})", levels, [str(answered), per(front), per(user + system)]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    names = sorted(p.name[: -len(".answered")] for p in out.glob("*.answered"))
    names.sort(key=lambda n: (n.rsplit("-", 1)[1], list(MODES).index(n.rsplit("-", 1)[0])))
    rows = [row(out, n) for n in names]
    levels = sorted({c for _, measured, _ in rows for c in measured})
    header = ["run", *[f"c{c}: infer/s, p99" for c in levels], "answered",
              "server CPU us / request (devices apart)", "perf_analyzer CPU us / request"]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for label, measured, rest in rows:
        cells = [label, *[measured.get(c, "-") for c in levels], *rest]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
