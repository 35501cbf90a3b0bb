"""Checks deploy/k8s for what a schema cannot see, then runs its configuration for real.

Static checks (the manifests against each other): every workload's selector matches its
pod labels; every Service selects pods and targets a port they declare; probes and the
Prometheus annotation use declared ports; the ports in the ConfigMap's controller.toml are
the container ports; the worker's `--controller` names a Service and its port; every
`--config` path is a key of the mounted ConfigMap; every claim exists; kustomization lists
every manifest. The image (`Dockerfile`, beside deploy/) installs the ONNX Runtime version
scripts/onnxruntime.sh pins for the `ort` crate's API.

Run checks (`--binary PATH`): the ConfigMap's controller.toml and worker.toml are started
as they are (only the addresses moved to free loopback ports and the repository to a
temporary directory): the probe paths are routes of the server's OpenAPI document, the
liveness probe answers 200, readiness says 503 until the worker's device joins and 200
after, and the scrape path serves metrics.

Usage: deploy_check.py DEPLOY_DIR [--binary target/debug/clockwork]
"""

import argparse
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request

import yaml

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


def load(directory):
    """Every object of every manifest, and the kustomization's resource list."""
    objects, listed = [], None
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            if doc.get("kind") == "Kustomization":
                listed = set(doc.get("resources", []))
            else:
                objects.append((path.name, doc))
    files = {name for name, _ in objects}
    check(listed == files, f"kustomization.yaml lists {sorted(listed or [])}, manifests are {sorted(files)}")
    return objects


def by_kind(objects, kind):
    return {doc["metadata"]["name"]: doc for _, doc in objects if doc["kind"] == kind}


def pod_templates(objects):
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]
        for _, doc in objects
        if doc["kind"] in WORKLOADS
    }


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def container_ports(template):
    return {
        p["name"]: p["containerPort"]
        for c in template["spec"]["containers"]
        for p in c.get("ports", [])
    }


def check_selectors(objects):
    for _, doc in objects:
        if doc["kind"] in WORKLOADS:
            selector = doc["spec"]["selector"]["matchLabels"]
            labels = doc["spec"]["template"]["metadata"]["labels"]
            check(matches(selector, labels), f"{doc['metadata']['name']}: selector {selector} does not match its pod labels {labels}")


def check_services(objects):
    templates = pod_templates(objects)
    for name, service in by_kind(objects, "Service").items():
        selected = [t for t in templates.values() if matches(service["spec"]["selector"], t["metadata"]["labels"])]
        check(selected, f"service {name} selects no pods")
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for t in selected:
                ports = container_ports(t)
                check(target in ports or target in ports.values(), f"service {name} targets port {target!r}, pods declare {ports}")


def probe_paths(template):
    """(path, port) of every HTTP probe of the pod."""
    found = []
    for c in template["spec"]["containers"]:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = c.get(kind)
            if probe and "httpGet" in probe:
                found.append((kind, probe["httpGet"]["path"], probe["httpGet"]["port"]))
    return found


def config_files(template, configmaps):
    """Container path -> ConfigMap text of each `--config` argument."""
    mounts = {}
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    files = {}
    for c in template["spec"]["containers"]:
        for m in c.get("volumeMounts", []):
            mounts[m["mountPath"]] = volumes[m["name"]]
        args = c.get("args", [])
        for flag, value in zip(args, args[1:]):
            if flag != "--config":
                continue
            directory, key = value.rsplit("/", 1)
            volume = mounts.get(directory)
            check(volume and "configMap" in volume, f"--config {value}: no ConfigMap mounted at {directory}")
            data = configmaps[volume["configMap"]["name"]]["data"]
            check(key in data, f"--config {value}: the ConfigMap has no key {key}")
            files[value] = data[key]
    return files


def arg(template, flag):
    args = template["spec"]["containers"][0].get("args", [])
    for a, b in zip(args, args[1:]):
        if a == flag:
            return b
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def check_wiring(objects):
    """Returns (controller.toml text, worker.toml text, probe paths, scrape path)."""
    templates = pod_templates(objects)
    configmaps = by_kind(objects, "ConfigMap")
    services = by_kind(objects, "Service")
    claims = by_kind(objects, "PersistentVolumeClaim")
    controller = templates["clockwork-controller"]
    worker = templates["clockwork-worker"]
    for name, t in templates.items():
        ports = container_ports(t)
        for kind, path, port in probe_paths(t):
            check(port in ports or port in ports.values(), f"{name}: {kind} on undeclared port {port!r}")
        for v in t["spec"].get("volumes", []):
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                check(claim in claims, f"{name}: claim {claim} is not in the manifests")
    controller_toml = tomllib.loads(next(iter(config_files(controller, configmaps).values())))
    ports = container_ports(controller)
    check(port_of(controller_toml["server"]["listen"]) == ports["http"], "controller.toml's [server] listen is not the http container port")
    check(port_of(controller_toml["cluster"]["listen"]) == ports["cluster"], "controller.toml's [cluster] listen is not the cluster container port")
    annotations = controller["metadata"].get("annotations", {})
    check(int(annotations["prometheus.io/port"]) == ports["http"], "the scrape port is not the http port")
    host, port = arg(worker, "--controller").rsplit(":", 1)
    check(host in services, f"the worker dials {host}, which is no Service")
    service_ports = {p["port"]: p.get("targetPort") for p in services[host]["spec"]["ports"]}
    check(int(port) in service_ports, f"service {host} has no port {port}")
    check(service_ports[int(port)] in ("cluster", ports["cluster"]), f"service {host}:{port} does not reach the controller's cluster port")
    check(arg(worker, "--name") == "$(NODE_NAME)", "the worker is not named after its node")
    worker_files = config_files(worker, configmaps)
    paths = sorted({p for _, p, _ in probe_paths(controller)})
    return (
        next(iter(config_files(controller, configmaps).values())),
        next(iter(worker_files.values())),
        paths,
        annotations["prometheus.io/path"],
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None, b""  # not listening yet


def wait_for(predicate, seconds, what, logs):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise Failed(f"{what} within {seconds} s; logs:\n" + "\n".join(p.read_text()[-3000:] for p in logs))


def run_checks(binary, controller_text, worker_text, paths, scrape):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        http, cluster = free_port(), free_port()
        # Only the addresses and the repository move; everything else runs as shipped.
        text = re.sub(r'listen = "0\.0\.0\.0:8000"', f'listen = "127.0.0.1:{http}"', controller_text)
        text = re.sub(r'listen = "0\.0\.0\.0:7070"', f'listen = "127.0.0.1:{cluster}"', text)
        text = text.replace('path = "/models"', f'path = "{tmp / "models"}"')
        (tmp / "controller.toml").write_text(text)
        (tmp / "worker.toml").write_text(worker_text)
        logs = [tmp / "controller.log", tmp / "worker.log"]
        base = f"http://127.0.0.1:{http}"
        procs = []
        try:
            procs.append(subprocess.Popen([binary, "serve", "--config", str(tmp / "controller.toml")], cwd=tmp, stderr=logs[0].open("w")))
            wait_for(lambda: status(base + "/v2/health/live")[0] == 200, 240, "the controller is live", logs)
            openapi = __import__("json").loads(status(base + "/v2/openapi.json")[1])
            for path in paths:
                check(path in openapi["paths"], f"probe path {path} is not a route of the server")
            code, body = status(base + scrape)
            check(code == 200 and b"# TYPE" in body, f"the scrape path {scrape} answers {code}")
            check(status(base + "/v2/health/ready")[0] == 503, "ready before any worker joined")
            procs.append(subprocess.Popen([binary, "worker", "--controller", f"127.0.0.1:{cluster}", "--config", str(tmp / "worker.toml"), "--name", "deploy-check"], cwd=tmp, stderr=logs[1].open("w")))
            wait_for(lambda: status(base + "/v2/health/ready")[0] == 200, 60, "the controller is ready once the worker joined", logs)
        finally:
            for p in procs:
                p.kill()
                p.wait()


def check_image(directory):
    """The Dockerfile's ONNX Runtime is the version scripts/onnxruntime.sh pins."""
    root = directory.resolve().parent.parent
    pinned = re.search(r"^version=(\S+)$", (root / "scripts/onnxruntime.sh").read_text(), re.M)
    image = re.search(r"^ARG ONNXRUNTIME_VERSION=(\S+)$", (root / "Dockerfile").read_text(), re.M)
    check(pinned and image, "scripts/onnxruntime.sh or the Dockerfile names no ONNX Runtime version")
    check(pinned.group(1) == image.group(1),
          f"the Dockerfile installs ONNX Runtime {image.group(1)}, scripts/onnxruntime.sh pins {pinned.group(1)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--binary")
    args = parser.parse_args()
    try:
        objects = load(args.directory)
        check_selectors(objects)
        check_services(objects)
        wiring = check_wiring(objects)
        check_image(args.directory)
        print(f"deploy: {len(objects)} objects wired consistently, the image's ONNX Runtime pinned")
        if args.binary:
            # The processes run in a temporary directory: the binary's path must not be relative.
            run_checks(str(pathlib.Path(args.binary).resolve()), *wiring)
            print("deploy: controller and worker configurations run; probes answer as declared")
    except (Failed, KeyError, StopIteration) as e:
        print(f"deploy check failed: {e!r}" if not isinstance(e, Failed) else f"deploy check failed: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
