#!/usr/bin/env python3
"""Turns a served model repository and a configuration into their emulated twins: the same
models on one `sim` device that runs each at the times its profile measured, so that an
experiment can free the cores a real device would hold (bench/edge/emulated.sh,
bench/overload/emulated.sh). The emulated device's timers wait for the server's core like
everything on it: past what that core can do (the zoo's burst at 80,000 requests/s) its
runs fall far behind, and the emulation says nothing. At 20,000/s its executor took 6 to 7
of the core's 20 CPU s while an emulated run yielded in a loop through its last
millisecond; since those sleep on the process's timer thread, 2.2 s and 0.3-0.4 s of the
timer thread (docs/EXPERIMENTS.md, "Emulated devices that sleep").

    bench/emulate.py repository REPO KIND   # every model of REPO: its KIND profile, sim-served
    bench/emulate.py config FILE REPO       # FILE's configuration on REPO with one sim device

`repository` keeps, in each `<model>/<version>/profile.json` under REPO, the record of
device kind KIND (`ort`, `cpu`) renamed `cpu` (the record a sim device reads times from),
and lets `sim` serve the model (`backends = ["sim"]` in its `config.toml`); it prints each
model's batch-1 time. `config` prints FILE with REPO as the repository (nothing generated
into it) and its first `[[devices]]` group replaced by one `sim` device.
"""
import glob
import json
import os
import re
import sys


def repository(repo, kind):
    for path in sorted(glob.glob(os.path.join(repo, "*", "*", "profile.json"))):
        model = os.path.basename(os.path.dirname(os.path.dirname(path)))
        records = [r for r in json.load(open(path)) if r["kind"] == kind]
        if not records:
            sys.exit(f"{path}: no {kind} record (is ORT_DYLIB_PATH set for ort?)")
        records[0]["kind"] = "cpu"
        json.dump(records[:1], open(path, "w"), indent=2)
        config = os.path.join(repo, model, "config.toml")
        text = open(config).read() if os.path.exists(config) else ""
        if "backends" not in text:
            with open(config, "a") as f:
                f.write('\nbackends = ["sim"]\n')
        batches = records[0]["profile"]["batches"]
        one = batches[0]["latency"]["p50"] / 1e6
        print(f"emulated: {model} at its {kind} times (batch {batches[0]['batch']}: {one:.2f} ms)")


# A `[[devices]]` group: its own lines, then an optional `[devices.<backend>]` table.
DEVICES = re.compile(r"\[\[devices\]\]\n(?:[^\[\n][^\n]*\n|\n)*(?:\[devices\.\w+\]\n(?:[^\[\n][^\n]*\n)*)?")


def config(path, repo):
    text = open(path).read()
    text = re.sub(r'(?m)^path = "[^"]*"', f'path = "{os.path.abspath(repo)}"', text, count=1)
    text = text.replace("generate_zoo = true", "generate_zoo = false")
    sim = '[[devices]]\nbackend = "sim"\nprofile = "v100"\ncount = 1\n\n'
    text, n = DEVICES.subn(sim, text, count=1)
    if n != 1:
        sys.exit(f"{path}: no [[devices]] group to replace")
    print(text, end="")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("repository", "config"):
        sys.exit(__doc__)
    {"repository": repository, "config": config}[sys.argv[1]](sys.argv[2], sys.argv[3])
