#!/usr/bin/env python3
"""The server's CPU over one rate of the edge bench, by thread name: `run.sh` takes a
snapshot of every thread's CPU seconds before and after each rate and keeps the
difference, so that a rate's outcome can be read against what the front-end core did
(the HTTP worker, the decoders, the controller, and the client beside them).

    bench/edge/cpu.py snapshot PID > before.json
    bench/edge/cpu.py used before.json PID > cpu-json-2.json   # {thread name: seconds}

Reads /proc (the threads' user + system time) through `bench/overload/sample.py`.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "overload"))
from sample import cpu_by_name, thread_cpu  # noqa: E402


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "snapshot":
        print(json.dumps(thread_cpu(int(sys.argv[2]))))
    elif len(sys.argv) == 4 and sys.argv[1] == "used":
        before = {tid: tuple(v) for tid, v in json.load(open(sys.argv[2])).items()}
        print(json.dumps(cpu_by_name(before, thread_cpu(int(sys.argv[3])))))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
