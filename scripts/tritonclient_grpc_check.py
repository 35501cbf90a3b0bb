"""Drives a running clockwork server with Triton's own Python gRPC client.

Usage: python tritonclient_grpc_check.py GRPC_HOST:PORT HTTP_HOST:PORT

Checks over gRPC what tritonclient_check.py checks over HTTP: health, server and model
metadata, the model config, inference (the client's raw tensors, and typed contents sent
by hand), errors as gRPC codes, repository load/unload, a pipeline's ensemble config and
inference; that a real model answers the same over both protocols, a batch of n items
in one gRPC request included, and an input and output in system shared memory; and
Triton's stream API, each request answered once.
Exits non-zero with a message on the first failure.
"""

import os
import queue
import sys
import time

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

MODEL = "mlp"


def infer_mlp(client):
    data = np.linspace(0.0, 1.0, 64, dtype=np.float32).reshape(1, 64)
    inputs = [grpcclient.InferInput("input", list(data.shape), "FP32")]
    inputs[0].set_data_from_numpy(data)
    outputs = [grpcclient.InferRequestedOutput("output")]
    result = client.infer(MODEL, inputs, outputs=outputs, request_id="grpc-1")
    output = result.as_numpy("output")
    assert output is not None and output.shape == (1, 10), output
    assert output.dtype == np.float32, output.dtype
    response = result.get_response(as_json=True)
    assert response["id"] == "grpc-1", response
    assert response["parameters"]["emulated"]["bool_param"] is True, response
    return data, output


def typed_contents(url, data):
    """Typed contents (fp32_contents), which tritonclient never sends: by hand."""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
    request = service_pb2.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="input", datatype="FP32", shape=[1, 64])
    tensor.contents.fp32_contents.extend(data.flatten().tolist())
    response = stub.ModelInfer(request, timeout=10)
    assert response.outputs[0].name == "output", response
    return np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(1, 10)


def expect_code(call, code, mentions):
    try:
        call()
    except InferenceServerException as error:
        assert error.status() == str(code), (error.status(), str(error))
        assert mentions in str(error), str(error)
    else:
        raise AssertionError(f"expected {code}")


def check_errors(client):
    zeros = grpcclient.InferInput("input", [1, 64], "FP32")
    zeros.set_data_from_numpy(np.zeros((1, 64), dtype=np.float32))
    expect_code(lambda: client.infer("no-such-model", [zeros]),
                grpc.StatusCode.NOT_FOUND, "unknown model")
    wrong = grpcclient.InferInput("input", [1, 63], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 63), dtype=np.float32))
    expect_code(lambda: client.infer(MODEL, [wrong]),
                grpc.StatusCode.INVALID_ARGUMENT, "shape")
    client.unload_model(MODEL)
    assert not client.is_model_ready(MODEL), "unloaded model still ready"
    expect_code(lambda: client.infer(MODEL, [zeros]),
                grpc.StatusCode.UNAVAILABLE, "unloaded")
    client.load_model(MODEL)
    assert client.is_model_ready(MODEL), "reloaded model not ready"


def check_pipeline(client):
    client.load_model("chain")
    config = client.get_model_config("chain", as_json=True)["config"]
    assert config["platform"] == "ensemble", config
    step = config["ensemble_scheduling"]["step"][0]
    assert step["model_name"] == "mlp" and step["input_map"] == {"input": "x"}, config
    data = np.linspace(0.0, 1.0, 64, dtype=np.float32).reshape(1, 64)
    inputs = [grpcclient.InferInput("x", [1, 64], "FP32")]
    inputs[0].set_data_from_numpy(data)
    assert client.infer("chain", inputs).as_numpy("y").shape == (1, 10)


def check_stream(url):
    """Triton's stream API (`start_stream`, `async_stream_infer`): the zoo's cnn on the cpu
    backend, answers matched by request id, each what a single call answers; a request
    for an unknown model is answered by an error on the stream, which stays open."""
    client = grpcclient.InferenceServerClient(url=url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    slack = {"slo_ms": 10000}
    rng = np.random.default_rng(3)
    sent = {}
    for i in range(6):
        data = rng.random((1, 3, 32, 32), dtype=np.float32)
        tensor = grpcclient.InferInput("input", [1, 3, 32, 32], "FP32")
        tensor.set_data_from_numpy(data)
        if i == 2:
            client.async_stream_infer("no-such-model", [tensor], request_id="lost")
        client.async_stream_infer("cnn", [tensor], request_id=f"s-{i}", parameters=slack)
        sent[f"s-{i}"] = tensor
    got, errors = {}, []
    for _ in range(len(sent) + 1):
        result, error = answers.get(timeout=30)
        if error is not None:
            errors.append(str(error))
        else:
            got[result.get_response().id] = result.as_numpy("output")
    client.stop_stream()
    assert sorted(got) == sorted(sent), (sorted(got), errors)
    assert len(errors) == 1 and "no-such-model" in errors[0], errors
    alone = {
        request_id: client.infer("cnn", [tensor], parameters=slack).as_numpy("output")
        for request_id, tensor in sent.items()
    }
    # Streamed requests may run batched together, and the runtime's kernels sum in an order
    # that depends on the batch, so an answer matches its single call to float rounding
    # (CI once saw 1e-6 relative), not bit for bit; the tolerance still tells every
    # request's answer from every other's.
    for request_id, answer in got.items():
        for other, single in alone.items():
            close = np.allclose(answer, single, rtol=1e-4, atol=1e-6)
            assert close == (other == request_id), (request_id, other, answer, single)


def check_real_model(client, http):
    """The zoo's cnn on the cpu backend: the same answer over gRPC as over HTTP."""
    client.load_model("cnn")
    assert client.is_model_ready("cnn"), "cnn ready once loaded"
    index = {m["name"]: m["state"] for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index.get("cnn") == "READY", index
    data = np.random.default_rng(1).random((1, 3, 32, 32), dtype=np.float32)
    slack = {"slo_ms": 10000}
    via_grpc = grpcclient.InferInput("input", [1, 3, 32, 32], "FP32")
    via_grpc.set_data_from_numpy(data)
    scores = client.infer("cnn", [via_grpc], parameters=slack).as_numpy("output")
    via_http = httpclient.InferInput("input", [1, 3, 32, 32], "FP32")
    via_http.set_data_from_numpy(data, binary_data=True)
    same = http.infer("cnn", [via_http], parameters=slack).as_numpy("output")
    assert abs(float(scores.sum()) - 1.0) < 1e-4, scores
    assert np.array_equal(scores, same), (scores, same)
    # A batch of 3 items in one gRPC request: row i is what item i alone gets over HTTP.
    batch = np.random.default_rng(2).random((3, 3, 32, 32), dtype=np.float32)
    many = grpcclient.InferInput("input", [3, 3, 32, 32], "FP32")
    many.set_data_from_numpy(batch)
    rows = client.infer("cnn", [many], parameters=slack).as_numpy("output")
    assert rows.shape == (3, 10), rows.shape
    for i in range(3):
        one = httpclient.InferInput("input", [1, 3, 32, 32], "FP32")
        one.set_data_from_numpy(batch[i:i + 1], binary_data=True)
        alone = http.infer("cnn", [one], parameters=slack).as_numpy("output")
        assert np.allclose(rows[i], alone[0], rtol=1e-4, atol=1e-5), (i, rows[i], alone)
    check_shared_memory(client, data, scores, slack)
    # Triton's statistics extension (uint64 fields are JSON strings in protobuf's JSON).
    # Its counts follow the answers by a moment; the HTTP check's requests count too.
    deadline = time.monotonic() + 5.0
    while True:
        stats = client.get_inference_statistics("cnn", as_json=True)["model_stats"][0]
        if int(stats.get("inference_count", 0)) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert stats["name"] == "cnn" and int(stats["inference_count"]) >= 5, stats


def check_shared_memory(client, data, scores, parameters):
    """The cnn's input and output in two regions that tritonclient created, registered
    over gRPC: the same scores as the answer that carried them."""
    keys = [f"/clockwork-grpc-{os.getpid()}-{side}" for side in ("in", "out")]
    handles = [shm.create_shared_memory_region(f"grpc_{side}", key, size)
               for side, key, size in zip(("in", "out"), keys, (data.nbytes, scores.nbytes))]
    try:
        shm.set_shared_memory_region(handles[0], [data])
        client.register_system_shared_memory("grpc_in", keys[0], data.nbytes)
        client.register_system_shared_memory("grpc_out", keys[1], scores.nbytes)
        status = client.get_system_shared_memory_status(as_json=True)
        assert sorted(status["regions"]) == ["grpc_in", "grpc_out"], status
        inputs = [grpcclient.InferInput("input", [1, 3, 32, 32], "FP32")]
        inputs[0].set_shared_memory("grpc_in", data.nbytes)
        outputs = [grpcclient.InferRequestedOutput("output")]
        outputs[0].set_shared_memory("grpc_out", scores.nbytes)
        result = client.infer("cnn", inputs, outputs=outputs, parameters=parameters)
        output = result.get_output("output")
        assert list(output.shape) == [1, 10], output
        written = shm.get_contents_as_numpy(handles[1], np.float32, [1, 10])
        assert np.array_equal(written, scores), (written, scores)
        client.unregister_system_shared_memory()
        status = client.get_system_shared_memory_status(as_json=True)
        assert not status.get("regions"), status
    finally:
        for handle in handles:
            shm.destroy_shared_memory_region(handle)


def main():
    url, http_url = sys.argv[1], sys.argv[2]
    client = grpcclient.InferenceServerClient(url=url)
    http = httpclient.InferenceServerClient(url=http_url, network_timeout=30.0)
    assert client.is_server_live() and client.is_server_ready(), "server not live and ready"
    assert client.is_model_ready(MODEL), "model not ready"
    metadata = client.get_server_metadata(as_json=True)
    assert "model_repository" in metadata["extensions"], metadata
    model = client.get_model_metadata(MODEL, as_json=True)
    assert model["inputs"][0]["shape"] == ["-1", "64"], model
    config = client.get_model_config(MODEL, as_json=True)["config"]
    # mlp-small's largest batch: the most items one request may carry.
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == ["64"], config
    assert config["input"][0]["data_type"] == "TYPE_FP32", config

    data, raw = infer_mlp(client)
    typed = typed_contents(url, data)
    assert np.array_equal(raw, typed), (raw, typed)
    check_errors(client)
    check_real_model(client, http)
    check_stream(url)
    check_pipeline(client)
    print("tritonclient gRPC check passed: health, metadata, config, raw and typed inference,"
          " error codes, load/unload, a pipeline, cpu answers equal to HTTP's (a batch of 3 too),"
          " input and output in system shared memory, statistics, a stream of requests answered by id")


if __name__ == "__main__":
    main()
