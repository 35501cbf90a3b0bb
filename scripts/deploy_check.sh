#!/usr/bin/env bash
# Validates deploy/k8s offline: every manifest against Kubernetes' own schema
# (kubernetes-validate --strict, from PyPI: unknown fields fail), then
# scripts/deploy_check.py (what a schema cannot see, and the ConfigMap's controller and
# worker configurations started for real). Installs its tools into target/deploy-venv.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/deploy-venv
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        'kubernetes-validate==1.37.0' 'PyYAML>=6,<7'
fi

manifests=$(ls deploy/k8s/*.yaml | grep -v kustomization.yaml)
# shellcheck disable=SC2086
"$venv/bin/kubernetes-validate" --strict --quiet $manifests

cargo build --locked --quiet --bin clockwork
timeout 300 "$venv/bin/python" scripts/deploy_check.py deploy/k8s --binary target/debug/clockwork
