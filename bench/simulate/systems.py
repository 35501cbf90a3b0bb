"""SLOpt against its baselines: runs `clockwork simulate --pipeline` for experiments A, B
and C (see systems.sh) and prints their tables; A's goodput and P99 by load are also drawn
as SVG line plots.

Usage: systems.py --clockwork BIN --out DIR --duration D [--plots DIR] [A] [B] [C]
"""
import argparse
import json
import os
import subprocess

SYSTEMS = ["slopt", "slopt-noest", "slopt-notune", "slopt-nodrop", "nexus-like",
           "inferline-like", "triton-like", "even-split"]
# Each pipeline's flags and its capacity on 8 devices: the highest root rate at which
# slopt answers >= 99% of the roots in time in 20 s (traffic: pipeline.sh's 1350/s, the
# same with slopt; cascade: 6000/s, 0.936 at 7000/s, where cascade.sh's 3250/s predates
# the adaptive batch drop).
PIPELINES = {
    "traffic": (["--pipeline", "traffic", "--fanout-mean", "2", "--fanout-var", "3"], 1350),
    "cascade": (["--pipeline", "cascade", "--escalate", "0.25"], 6000),
}
LOADS = [0.3, 0.5, 0.7, 0.9, 1.0, 1.1, 1.2]
SLO_MS = 100
DEVICES_A = 8
MAX_DEVICES = 16


def simulate(args, pipe, rate, devices, systems, out, slo_ms=SLO_MS, extra=()):
    """One process for `systems` on the same arrivals; their reports by name. `extra`
    flags (each with one value) replace the pipeline's own of the same name."""
    if not os.path.exists(f"{out}/report.json"):
        base, _ = PIPELINES[pipe]
        given = set(extra[0::2])
        flags = [x for pair in zip(base[0::2], base[1::2]) if pair[0] not in given
                 for x in pair]
        subprocess.run([args.clockwork, "simulate", "--quiet", *flags, *extra, "--devices",
                        str(devices), "--slo-ms", str(slo_ms), "--seed", "1", "--rate",
                        str(rate), "--duration", args.duration, "--policy",
                        ",".join(systems), "--out", out],
                       check=True, stdout=subprocess.DEVNULL)
    with open(f"{out}/report.json") as f:
        return {p["policy"]: p for p in json.load(f)["policies"]}


def table(columns, rows):
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print()


def experiment_a(args):
    results = {}
    for pipe, (_, capacity) in PIPELINES.items():
        for load in LOADS:
            rate = round(capacity * load)
            out = f"{args.out}/A-{pipe}-{rate}-{args.duration}"
            results[pipe, load] = simulate(args, pipe, rate, DEVICES_A, SYSTEMS, out)
        print(f"A, {pipe} ({DEVICES_A} devices, capacity {capacity}/s): root goodput / "
              "P99 of answered roots (ms); late roots in brackets where any\n")
        rows = []
        for s in SYSTEMS:
            cells = []
            for load in LOADS:
                p = results[pipe, load][s]
                late = f" [{p['late']}]" if p["late"] else ""
                cells.append(f"{p['goodput']:.3f} / {p['latency_ms']['p99']:.1f}{late}")
            rows.append([s, *cells])
        table(["system", *[f"{x}x" for x in LOADS]], rows)
        if args.plots:
            for metric, label in (("goodput", "root goodput"), ("p99", "P99 ms")):
                series = {s: [value(results[pipe, load][s], metric) for load in LOADS]
                          for s in SYSTEMS}
                svg(f"{args.plots}/systems-A-{pipe}-{metric}.svg",
                    f"{pipe}: {label} by load (x capacity), {DEVICES_A} devices", series)
    return results


def value(p, metric):
    return p["goodput"] if metric == "goodput" else p["latency_ms"]["p99"]


WARMUP_S = 2.0


def steady(p):
    """Root goodput after the first WARMUP_S seconds (the mean of the report's goodput
    buckets: Poisson roots fill them about evenly), while placement loads replicas."""
    later = [b["value"] for b in p["goodput_over_time"] if b["t_s"] >= WARMUP_S]
    return sum(later) / len(later) if later else p["goodput"]


def meets_b(p):
    return p["goodput"] >= 0.99


def meets_b_steady(p):
    return steady(p) >= 0.99


def meets_c(p):
    return p["latency_ms"]["p99"] <= SLO_MS and p["goodput"] >= 0.95


def fewest(args, pipe, system, meets):
    """Binary search over 1..MAX_DEVICES (None: not even MAX_DEVICES)."""
    _, rate = PIPELINES[pipe]
    def ok(devices):
        out = f"{args.out}/BC-{pipe}-{rate}-{system}-{devices}-{args.duration}"
        return meets(simulate(args, pipe, rate, devices, [system], out)[system])
    if not ok(MAX_DEVICES):
        return None
    lo, hi = 0, MAX_DEVICES  # lo fails (or is 0), hi meets
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def experiment_cost(args, name, meets, what):
    for pipe, (_, rate) in PIPELINES.items():
        cost = {s: fewest(args, pipe, s, meets) for s in SYSTEMS}
        print(f"{name}, {pipe} at {rate} roots/s: fewest devices with {what}; "
              "saving = 1 - cost(slopt)/cost(system)\n")
        rows = []
        for s in SYSTEMS:
            c, mine = cost[s], cost["slopt"]
            saving = f"{1 - mine / c:+.0%}" if c and mine else "-"
            rows.append([s, c if c else f">{MAX_DEVICES}", saving])
        table(["system", "devices", "saving"], rows)


# The traffic cascade's critical path at batch 1: detector 6 ms, person classifier 2.73 ms.
CRITICAL_MS = 8.73
SWEEP_RATE = 300


def sweep_row(name, reports):
    return [name, *[f"{reports[s]['goodput']:.3f} / {reports[s]['latency_ms']['p99']:.1f}"
                    + (f" [{reports[s]['late']}]" if reports[s]["late"] else "")
                    for s in SYSTEMS]]


def experiment_sweeps(args):
    """The traffic cascade on 8 devices at SWEEP_RATE roots/s unless said: objectives
    from 1.5x to 4x the critical path, fan-out mean and CV, bursty arrivals."""
    rows = []
    for factor in [1.5, 2, 3, 4]:
        slo = round(CRITICAL_MS * factor)
        out = f"{args.out}/S-slo-{slo}-{args.duration}"
        rows.append(sweep_row(f"objective {factor}x ({slo} ms)",
                              simulate(args, "traffic", SWEEP_RATE, DEVICES_A, SYSTEMS, out,
                                       slo_ms=slo)))
    for mean in [1, 4, 8]:
        for cv in [0.5, 2.0]:
            var = (cv * mean) ** 2
            out = f"{args.out}/S-fan-{mean}-{cv}-{args.duration}"
            extra = ["--fanout-mean", str(mean), "--fanout-var", f"{var:g}"]
            rows.append(sweep_row(f"fan-out mean {mean}, CV {cv}",
                                  simulate(args, "traffic", SWEEP_RATE, DEVICES_A, SYSTEMS,
                                           out, extra=extra)))
    for load in [0.5, 0.8]:
        rate = round(PIPELINES["traffic"][1] * load)
        out = f"{args.out}/S-bursty-{load}-{args.duration}"
        rows.append(sweep_row(f"bursty, mean {load}x ({rate}/s)",
                              simulate(args, "traffic", rate, DEVICES_A, SYSTEMS, out,
                                       extra=["--workload", "bursty"])))
    print(f"Sweeps, traffic, {DEVICES_A} devices, {SWEEP_RATE} roots/s unless said: root "
          "goodput / P99 of answered roots (ms); late roots in brackets\n")
    table(["run", *SYSTEMS], rows)


COLOURS = ["#1b9e77", "#66a61e", "#a6761d", "#666666", "#d95f02", "#7570b3", "#e7298a",
           "#e6ab02"]


def svg(path, title, series):
    """A line plot of `series` (name -> one value per load) over LOADS."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w, h, left, top, right, bottom = 640, 360, 60, 30, 150, 40
    values = [v for vs in series.values() for v in vs]
    lo, hi = min(0.0, min(values)), max(values) * 1.05 or 1.0
    x = lambda i: left + i * (w - left - right) / (len(LOADS) - 1)
    y = lambda v: top + (hi - v) * (h - top - bottom) / (hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13">{title}</text>',
           f'<line x1="{left}" y1="{y(lo)}" x2="{w - right}" y2="{y(lo)}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(lo)}" stroke="black"/>']
    for i, load in enumerate(LOADS):
        out.append(f'<text x="{x(i)}" y="{h - bottom + 15}" text-anchor="middle">{load}</text>')
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        out.append(f'<text x="{left - 5}" y="{y(v) + 4}" text-anchor="end">{v:.3g}</text>')
    for n, (name, vs) in enumerate(series.items()):
        c = COLOURS[n % len(COLOURS)]
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vs))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        out.append(f'<text x="{w - right + 10}" y="{top + 14 * n + 10}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--clockwork", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--plots")
    parser.add_argument("experiments", nargs="*", default=["A", "B", "C"])
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if "A" in args.experiments:
        experiment_a(args)
    if "B" in args.experiments:
        experiment_cost(args, "B", meets_b, ">= 99% of roots in time")
    if "B2" in args.experiments:
        experiment_cost(args, "B after warm-up", meets_b_steady,
                        f">= 99% of roots in time after the first {WARMUP_S:g} s")
    if "C" in args.experiments:
        experiment_cost(args, "C", meets_c,
                        "P99 of answered roots <= 100 ms and >= 95% in time")
    if "S" in args.experiments:
        experiment_sweeps(args)


if __name__ == "__main__":
    main()
