# Container image of clockwork: one binary that is the controller (`serve`) or a worker
# (`worker`), depending on its arguments. Multi-stage: the toolchain stays in the build
# stage; the runtime image holds the binary, CA certificates and nothing else of note, and
# runs as an unprivileged user.
#
#   docker build -t clockwork .
#   docker run --rm -p 8000:8000 clockwork serve --listen 0.0.0.0:8000
#
# The image carries ONNX Runtime's library (ORT_DYLIB_PATH), so the default configuration's
# `backend = "auto"` serves on it; unset the variable to serve on tract.
#
# The cuda feature only links CUDA at run time (cudarc loads it dynamically), so the image
# builds on machines without a GPU and runs on GPU nodes whose driver the runtime exposes.

FROM rust:1-bookworm AS build
WORKDIR /src
# Everything but what .dockerignore leaves out: the manifest names bench and test targets,
# and Cargo reads them all even to build one binary.
COPY . .
# --locked: the image builds exactly what Cargo.lock pins.
RUN cargo build --release --locked --bin clockwork \
    && strip target/release/clockwork

# ONNX Runtime's shared library, so that `backend = "auto"` (the default configuration's)
# serves on it rather than on tract: the `onnxruntime` wheel from PyPI, at the version
# scripts/onnxruntime.sh pins for the `ort` crate's C API (change the three together;
# scripts/deploy_check.py fails while this one and the script's differ).
FROM python:3.11-slim-bookworm AS onnxruntime
ARG ONNXRUNTIME_VERSION=1.31.1
RUN python -m pip install --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --target /ort "onnxruntime==${ONNXRUNTIME_VERSION}" \
    && cp "$(find /ort -path '*onnxruntime/capi/libonnxruntime.so*' -type f | sort | head -n 1)" \
        /libonnxruntime.so

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/clockwork --create-home clockwork
COPY --from=build /src/target/release/clockwork /usr/local/bin/clockwork
COPY --from=build /src/config.toml /etc/clockwork/config.toml
COPY --from=onnxruntime /libonnxruntime.so /usr/local/lib/libonnxruntime.so
# Where `auto` (and `ort` devices without a `library`) find it.
ENV ORT_DYLIB_PATH=/usr/local/lib/libonnxruntime.so
# The model repository: a volume in Kubernetes (deploy/k8s/), the zoo written on first
# run otherwise.
RUN mkdir -p /models && chown clockwork /models
USER 10001
WORKDIR /var/lib/clockwork
EXPOSE 8000 7070
ENTRYPOINT ["clockwork"]
CMD ["serve", "--config", "/etc/clockwork/config.toml", "--listen", "0.0.0.0:8000"]
