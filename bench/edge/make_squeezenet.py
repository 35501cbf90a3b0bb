#!/usr/bin/env python3
"""Writes the onnx wheel's squeezenet as a clockwork/Triton repository model.

The "light" squeezenet of the onnx package's test data has a fixed batch dimension of 1;
this makes the first dimension of its data input and of its output symbolic ("batch"),
drops the intermediate shapes that still name 1, and writes
<repo>/squeezenet/1/model.onnx with <repo>/squeezenet/config.toml (100 ms objective).
"""

import argparse
import pathlib

import onnx

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("source", help="light_squeezenet.onnx")
parser.add_argument("repo", help="model repository directory")
parser.add_argument("--max-batch", type=int, default=8)
args = parser.parse_args()

model = onnx.load(args.source)
graph = model.graph
weights = {t.name for t in graph.initializer}
data = [i for i in graph.input if i.name not in weights]
for value in data + list(graph.output):
    value.type.tensor_type.shape.dim[0].dim_param = "batch"
del graph.value_info[:]
onnx.checker.check_model(model)

home = pathlib.Path(args.repo) / "squeezenet"
(home / "1").mkdir(parents=True, exist_ok=True)
onnx.save(model, home / "1" / "model.onnx")
(home / "config.toml").write_text(
    f'# The onnx wheel\'s squeezenet, batch dimension made symbolic.\n'
    f'slo = "100ms"\nmax_batch_size = {args.max_batch}\n'
)
print(f"wrote {home}: inputs {[i.name for i in data]}, max batch {args.max_batch}")
