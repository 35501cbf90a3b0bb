"""Polls a running clockwork server while a burst runs: readiness (status and latency)
every 100 ms and the server's RSS (from /proc) every second, until the file named by
--stop exists; then prints one JSON summary. Standard library only."""
import argparse
import json
import os
import time
import urllib.error
import urllib.request


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def ready(base):
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=5) as answer:
            code = answer.status
    except urllib.error.HTTPError as error:
        code = error.code
    except OSError:
        code = 0
    return code, (time.monotonic() - started) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--stop", required=True)
    args = parser.parse_args()
    polls, not_ready, slowest, rss = 0, 0, 0.0, []
    last_rss = 0.0
    while not os.path.exists(args.stop):
        code, took = ready(args.base)
        polls += 1
        not_ready += code != 200
        slowest = max(slowest, took)
        if time.monotonic() - last_rss >= 1:
            rss.append(rss_mib(args.pid))
            last_rss = time.monotonic()
        time.sleep(0.1)
    print(json.dumps({
        "ready_polls": polls,
        "not_ready": not_ready,
        "ready_max_ms": round(slowest, 1),
        "rss_mib_first": round(rss[0], 1) if rss else None,
        "rss_mib_max": round(max(rss), 1) if rss else None,
        "rss_mib_last": round(rss[-1], 1) if rss else None,
        "rss_samples": len(rss),
    }))


if __name__ == "__main__":
    main()
