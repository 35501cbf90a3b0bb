"""How fast the simulator runs each policy, from half load to overload (issue 17, item 3).

For `clockwork` and `reactive`, one run per point and policy (each in its own process, so
that its CPU time is its own): the load sweep's points (Poisson, 48 models, 6 V100s,
100 ms, capacity 5540/s) and a maf-synth trace (1500 models, 4 V100s, 60 ms) at 900,
1800 and 2700 requests/s. Prints, per run, requests simulated per wall second (from the
report) and the cost per request in wall and in CPU microseconds, and the cost against the
same policy's at half load (0.5x of the sweep; 900/s for the trace). CPU time is printed
because on a shared machine a process gets only part of a core: wall time then measures
the neighbours as much as the simulator.

Usage: speed.py --clockwork BIN --out DIR [--duration 20s] [--trace-duration 60s]
"""
import argparse
import json
import resource
import subprocess

SWEEP = [0.5, 0.75, 1.0, 1.25, 1.5]
CAPACITY = 5540
TRACE_RATES = [900, 1800, 2700]
POLICIES = ["clockwork", "reactive"]


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(binary, out, args):
    """Runs one simulation; returns (its report's policy entry, CPU seconds it used)."""
    before = cpu_seconds()
    done = subprocess.run([binary, "simulate", "--quiet", *args, "--out", out],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    cpu = cpu_seconds() - before
    with open(f"{out}/report.json") as f:
        (policy,) = json.load(f)["policies"]
    return policy, cpu


def points(duration, trace_duration):
    """(label, half-load label, arguments) of every point."""
    for factor in SWEEP:
        rate = round(CAPACITY * factor)
        args = ["--workload", "poisson", "--models", "48", "--devices", "6", "--rate",
                str(rate), "--duration", duration, "--slo-ms", "100", "--seed", "1"]
        yield f"sweep {factor}x ({rate}/s)", "sweep 0.5x", args
    for rate in TRACE_RATES:
        args = ["--workload", "maf-synth", "--models", "1500", "--devices", "4",
                "--device-profile", "v100", "--rate", str(rate), "--duration",
                trace_duration, "--slo-ms", "60", "--seed", "1"]
        yield f"maf {rate}/s", "maf 900/s", args


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--clockwork", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--trace-duration", default="60s")
    a = parser.parse_args()
    print("| point | policy | requests | goodput | late | wall s | req/wall s | wall us/req "
          "| CPU us/req | wall cost / half load | CPU cost / half load |")
    print("|" + "---|" * 11)
    half = {}
    for label, base, args in points(a.duration, a.trace_duration):
        for policy in POLICIES:
            name = label.split(" (")[0].replace(" ", "-").replace("/", "")
            out = f"{a.out}/{name}-{policy}"
            p, cpu = run(a.clockwork, out, [*args, "--policy", policy])
            n = p["offered"]
            wall_us, cpu_us = p["wall_s"] * 1e6 / n, cpu * 1e6 / n
            if label.startswith(base):
                half[(base, policy)] = (wall_us, cpu_us)
            h_wall, h_cpu = half[(base, policy)]
            print(f"| {label} | {policy} | {n} | {p['goodput']:.4f} | {p['late']} "
                  f"| {p['wall_s']:.2f} | {p['sim_requests_per_wall_s']:.0f} | {wall_us:.2f} "
                  f"| {cpu_us:.2f} | {wall_us / h_wall:.2f} | {cpu_us / h_cpu:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
