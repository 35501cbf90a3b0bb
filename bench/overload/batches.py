#!/usr/bin/env python3
"""The batches each model ran between two readings of `/v2/models/stats` (Triton's
statistics, `batch_stats`): how a burst spent the devices' time. Prints, per model, its
batches, the items they held, their mean size, the device seconds they took and the
device milliseconds per item; then the four sizes it spent the most device time on.

    bench/overload/batches.py STATS_BEFORE STATS_AFTER
"""
import json
import sys


def batches(path):
    """{model: {size: (count, ns)}} from one reading."""
    out = {}
    for stat in json.load(open(path)).get("model_stats", []):
        sizes = out.setdefault(stat["name"], {})
        for b in stat.get("batch_stats", []):
            run = b["compute_infer"]
            sizes[b["batch_size"]] = (run["count"], run["ns"])
    return out


def main(before_path, after_path):
    before, after = batches(before_path), batches(after_path)
    for model, sizes in sorted(after.items()):
        was = before.get(model, {})
        ran = {}
        for size, (count, ns) in sizes.items():
            count0, ns0 = was.get(size, (0, 0))
            if count > count0:
                ran[size] = (count - count0, ns - ns0)
        count = sum(c for c, _ in ran.values())
        if not count:
            continue
        items = sum(size * c for size, (c, _) in ran.items())
        ns = sum(n for _, n in ran.values())
        top = sorted(ran.items(), key=lambda kv: -kv[1][1])[:4]
        used = ", ".join(f"{size}: {c} ({n / 1e9:.2f} s)" for size, (c, n) in top)
        print(f"burst batches, {model}: {count} batches, {items} items, mean size "
              f"{items / count:.1f}, device {ns / 1e9:.2f} s, {ns / 1e6 / items:.3f} ms an item; "
              f"most time at size {used}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
