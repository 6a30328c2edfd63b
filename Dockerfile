# syntax=docker/dockerfile:1
#
# The Conveyor image: both binaries, conveyor-operator and conveyor-scheduler, static (CGO_ENABLED=0)
# on a distroless base, running as the non-root user 65532. The Helm chart runs the operator with
# `command: [conveyor-operator]` and the scheduler with `command: [conveyor-scheduler, --config, ...]`.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/conveyor-dev/conveyor:0.1.0 --push .
#
# NOTE: this file has never been built by the project's own machinery. The development machine has no
# Docker engine and no registry (the tests run the binaries as local processes against a kwok cluster,
# see docs/install.md), so nothing here is exercised by `make test`. `make build` builds the same two
# binaries with the same Go toolchain.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# The Kubernetes version the scheduler is built from (go.mod's k8s.io/kubernetes). Stamped into the
# binaries as the Makefile does, so the scheduler reports v1.37.1 rather than v0.0.0-master.
ARG K8S_VERSION=v1.37.1
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false

# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY apis/ apis/
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; \
    minor="$(echo "${K8S_VERSION}" | cut -d. -f2)"; \
    ldflags="-s -w \
      -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
      -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=${minor} \
      -X k8s.io/component-base/version.gitTreeState=clean"; \
    for name in operator scheduler; do \
      GOOS="${TARGETOS}" GOARCH="${TARGETARCH}" go build -trimpath -ldflags "${ldflags}" \
        -o "/out/conveyor-${name}" "./cmd/${name}"; \
    done

# distroless/static: CA certificates, /etc/passwd with the nonroot user, tzdata; no shell, no
# package manager. Pin it by digest in a release pipeline.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="conveyor" \
      org.opencontainers.image.description="Conveyor operator and conveyor-scheduler" \
      org.opencontainers.image.source="https://github.com/conveyor-dev/conveyor"
COPY --from=build /out/conveyor-operator /out/conveyor-scheduler /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/conveyor-operator"]
