"""Polls a running clockwork server while a burst runs: readiness (status and latency)
every 100 ms and the server's RSS (from /proc) every second, until the file named by
--stop exists; then prints one JSON summary, with the CPU seconds the server's threads
used over the burst, by thread name (digits dropped: the HTTP workers, the devices, the
controller, the decoders). Standard library only."""
import argparse
import json
import os
import re
import time
import urllib.error
import urllib.request


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def thread_cpu(pid):
    """CPU seconds (user + system) of each thread of `pid`, by thread id."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        # The name is in parentheses and may hold spaces; the fields after it are fixed.
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        cpu[tid] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return cpu


def cpu_by_name(before, after):
    """CPU seconds used between two `thread_cpu` readings, summed by thread name."""
    used = {}
    for tid, (name, seconds) in after.items():
        name = re.sub(r"[0-9]+", "N", name)
        used[name] = used.get(name, 0) + seconds - before.get(tid, (name, 0))[1]
    return {name: round(s, 2) for name, s in sorted(used.items()) if s > 0.005}


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
    cpu_before, started = thread_cpu(args.pid), time.monotonic()
    while not os.path.exists(args.stop):
        code, took = ready(args.base)
        polls += 1
        not_ready += code != 200
        slowest = max(slowest, took)
        if time.monotonic() - last_rss >= 1:
            rss.append(rss_mib(args.pid))
            last_rss = time.monotonic()
        time.sleep(0.1)
    cpu = cpu_by_name(cpu_before, thread_cpu(args.pid))
    print(json.dumps({
        "server_cpu_s": round(sum(cpu.values()), 2),
        "server_cpu_by_thread": cpu,
        "burst_wall_s": round(time.monotonic() - started, 2),
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
