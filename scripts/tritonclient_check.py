"""Drives a running clockwork server with Triton's own Python HTTP client.

Usage: python tritonclient_check.py HOST:PORT

Checks what a Triton user does first: health, server and model metadata, the model
config, and inference with JSON tensors and with binary tensors; a real model's input
and output in system shared memory (tritonclient's own regions); and a pipeline's
ensemble config and inference. Exits non-zero with a
message on the first failure.
"""

import os
import sys
import time

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

MODEL = "mlp"


def infer(client, binary):
    data = np.linspace(0.0, 1.0, 64, dtype=np.float32).reshape(1, 64)
    inputs = [httpclient.InferInput("input", list(data.shape), "FP32")]
    inputs[0].set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("output", binary_data=binary)]
    result = client.infer(MODEL, inputs, outputs=outputs, request_id="check-1")
    output = result.as_numpy("output")
    assert output is not None, "no output 'output'"
    assert output.shape == (1, 10), f"output shape {output.shape}"
    assert output.dtype == np.float32, f"output dtype {output.dtype}"
    response = result.get_response()
    assert response["id"] == "check-1", response
    assert response["parameters"]["emulated"] is True, response
    return output


def main():
    url = sys.argv[1]
    client = httpclient.InferenceServerClient(url=url, connection_timeout=10.0, network_timeout=10.0)
    assert client.is_server_live(), "server not live"
    assert client.is_server_ready(), "server not ready"
    assert client.is_model_ready(MODEL), "model not ready"
    metadata = client.get_server_metadata()
    assert "binary_tensor_data" in metadata["extensions"], metadata
    model = client.get_model_metadata(MODEL)
    assert model["inputs"][0]["shape"] == [-1, 64], model
    config = client.get_model_config(MODEL)
    assert config["max_batch_size"] >= 1 and config["input"][0]["dims"] == [64], config

    as_json = infer(client, binary=False)
    as_binary = infer(client, binary=True)
    assert np.array_equal(as_json, as_binary), (as_json, as_binary)

    # Default outputs: tritonclient asks for every output as binary data.
    data = np.zeros((1, 64), dtype=np.float32)
    inputs = [httpclient.InferInput("input", [1, 64], "FP32")]
    inputs[0].set_data_from_numpy(data)
    assert client.infer(MODEL, inputs).as_numpy("output").shape == (1, 10)

    # A refusal surfaces as the client's exception, with the server's message.
    try:
        client.infer("no-such-model", inputs)
    except InferenceServerException as error:
        assert "unknown model" in str(error), str(error)
    else:
        raise AssertionError("unknown model was answered")
    check_real_model(client)
    check_pipeline(client)
    print("tritonclient check passed: health, metadata, config, JSON and binary inference,"
          " real inference on the cpu backend, a batch of 3 items in one request,"
          " input and output in system shared memory, statistics")


def check_pipeline(client):
    """A pipeline reads as Triton's ensemble and infers like a model."""
    client.load_model("chain")
    config = client.get_model_config("chain")
    assert config["platform"] == "ensemble", config
    step = config["ensemble_scheduling"]["step"][0]
    assert step["model_name"] == "mlp" and step["input_map"] == {"input": "x"}, config
    assert config["parameters"]["slo_ms"]["string_value"] == "200", config
    data = np.linspace(0.0, 1.0, 64, dtype=np.float32).reshape(1, 64)
    inputs = [httpclient.InferInput("x", [1, 64], "FP32")]
    inputs[0].set_data_from_numpy(data)
    result = client.infer("chain", inputs)
    assert result.as_numpy("y").shape == (1, 10), result.get_response()


def check_real_model(client):
    """The zoo's cnn, registered from the repository by the client, on a cpu device:
    real outputs (a softmax), batch dimension -1, a batch of items in one request."""
    assert not client.is_model_ready("cnn"), "cnn is only on disk until loaded"
    client.load_model("cnn")
    # Registered when the load answers; ready once a device has taken its weights, which
    # the policy starts at once but which takes a few tens of milliseconds more.
    deadline = time.monotonic() + 5.0
    while not client.is_model_ready("cnn") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.is_model_ready("cnn"), "cnn ready once loaded"
    model = client.get_model_metadata("cnn")
    assert model["inputs"][0]["shape"] == [-1, 3, 32, 32], model
    data = np.random.default_rng(1).random((1, 3, 32, 32), dtype=np.float32)
    inputs = [httpclient.InferInput("input", [1, 3, 32, 32], "FP32")]
    inputs[0].set_data_from_numpy(data, binary_data=True)
    # A slack objective (a request parameter): a cold load on a busy CI machine could
    # otherwise be refused, which is a correct answer but not what this checks.
    slack = {"slo_ms": 10000}
    result = client.infer("cnn", inputs, parameters=slack)
    scores = result.as_numpy("output")
    assert scores.shape == (1, 10), scores.shape
    assert abs(float(scores.sum()) - 1.0) < 1e-4, scores
    assert result.get_response()["parameters"]["emulated"] is False, result.get_response()
    # Different inputs, different answers: it is computed, not emulated.
    zeros = httpclient.InferInput("input", [1, 3, 32, 32], "FP32")
    zeros.set_data_from_numpy(np.zeros_like(data))
    other = client.infer("cnn", [zeros], parameters=slack).as_numpy("output")
    assert not np.allclose(scores, other), (scores, other)
    check_shared_memory(client, data, scores, slack)
    # Triton's statistics extension: the cnn's three answers above and the refusal of the
    # unregistered region (its counts follow the answers by a moment).
    deadline = time.monotonic() + 5.0
    while True:
        stats = client.get_inference_statistics("cnn")["model_stats"][0]
        if stats["inference_count"] >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    inference = stats["inference_stats"]
    assert stats["name"] == "cnn" and stats["inference_count"] == 3, stats
    assert inference["fail"]["count"] == 1 and inference["compute_infer"]["ns"] > 0, stats
    # A batch of 3 items in one request: row i is what item i alone gets.
    batch = np.random.default_rng(2).random((3, 3, 32, 32), dtype=np.float32)
    many = httpclient.InferInput("input", [3, 3, 32, 32], "FP32")
    many.set_data_from_numpy(batch, binary_data=True)
    rows = client.infer("cnn", [many], parameters=slack).as_numpy("output")
    assert rows.shape == (3, 10), rows.shape
    for i in range(3):
        one = httpclient.InferInput("input", [1, 3, 32, 32], "FP32")
        one.set_data_from_numpy(batch[i:i + 1], binary_data=True)
        alone = client.infer("cnn", [one], parameters=slack).as_numpy("output")
        assert np.allclose(rows[i], alone[0], rtol=1e-4, atol=1e-5), (i, rows[i], alone)


def check_shared_memory(client, data, scores, parameters):
    """The cnn's input read from, and its output written into, regions of one object
    that tritonclient created (the output's region at an offset): the same scores as the
    answer that carried them."""
    key = f"/clockwork-check-{os.getpid()}"
    at = 16384  # the output's region, past the input's 12,288 bytes
    handle = shm.create_shared_memory_region("check", key, at + scores.nbytes)
    try:
        shm.set_shared_memory_region(handle, [data])
        client.register_system_shared_memory("check_in", key, data.nbytes)
        client.register_system_shared_memory("check_out", key, scores.nbytes, offset=at)
        status = client.get_system_shared_memory_status()
        assert sorted(r["name"] for r in status) == ["check_in", "check_out"], status
        assert "system_shared_memory" in client.get_server_metadata()["extensions"]
        inputs = [httpclient.InferInput("input", [1, 3, 32, 32], "FP32")]
        inputs[0].set_shared_memory("check_in", data.nbytes)
        outputs = [httpclient.InferRequestedOutput("output")]
        outputs[0].set_shared_memory("check_out", scores.nbytes)
        result = client.infer("cnn", inputs, outputs=outputs, parameters=parameters)
        output = result.get_output("output")
        assert output["shape"] == [1, 10] and "data" not in output, output
        written = shm.get_contents_as_numpy(handle, np.float32, [1, 10], offset=at)
        assert np.array_equal(written, scores), (written, scores)
        # A region that is not registered is the client's exception, naming it.
        inputs[0].set_shared_memory("nowhere", data.nbytes)
        try:
            client.infer("cnn", inputs, parameters=parameters)
        except InferenceServerException as error:
            assert "region 'nowhere'" in str(error), str(error)
        else:
            raise AssertionError("an unregistered region was answered")
        client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status() == [], "regions left"
    finally:
        shm.destroy_shared_memory_region(handle)


if __name__ == "__main__":
    main()
