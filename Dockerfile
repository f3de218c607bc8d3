# syntax=docker/dockerfile:1
#
# opjournal's container image: static binaries on distroless, as a non-root
# user, without a shell. README.md, "Deployment", says how to run it.
#
#   docker build -t ghcr.io/opjournal/opjournal:dev .                # the journal, reconciler and gateway
#   docker build --target demo -t ghcr.io/opjournal/opjournal:demo . # the same plus opjournal-fakeprovider
#
# CI builds this file as it is with podman and runs the image: `make
# container-test` (scripts/container-test.sh; docs/deployment.md, "With
# podman"), on base images built locally when no registry is reachable.
#
# The entrypoint is `opjournal`; the default command is `serve`, on every
# interface, with the embedded SQLite store in the volume /var/lib/opjournal
# and the tokens file /etc/opjournal/auth.yaml, which must be mounted: the
# image never serves without authentication. Every default is an
# OPJOURNAL_* variable below, so `-e OPJOURNAL_DATABASE_URL=postgres://…`
# changes it and a flag after the image name wins over both. The other
# binaries are /usr/local/bin/opjournal-reconciler and
# /usr/local/bin/opjournal-gateway (`--entrypoint`, or `command:` in
# Kubernetes).
#
# deploy/deploy_test.go builds the binaries with this file's `go build`
# lines (the product's at the root; the test provider's in the harness
# module, `go -C harness build`) and checks that they are static; keep each
# line in one piece.

ARG GO_VERSION=1.26

# ---- build: static binaries -------------------------------------------------
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Cross-compiling is free without cgo: `docker buildx build --platform
# linux/amd64,linux/arm64 .` builds both on the builder's own platform.
ARG TARGETOS=linux
ARG TARGETARCH
COPY . .
# The module and build caches survive between builds (BuildKit); nothing of
# them reaches the image. modernc.org/sqlite is pure Go, so CGO_ENABLED=0
# gives binaries that need no libc.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags='-s -w' -o /out/ ./cmd/opjournal ./cmd/opjournal-reconciler ./cmd/opjournal-gateway
# The volume of the SQLite default, owned by the image's user (65532).
RUN mkdir -p /out/data && chmod 0700 /out/data

# ---- base: what both images share ------------------------------------------
# distroless/static: CA certificates, tzdata, /etc/passwd with the user
# nonroot (65532), /tmp; no shell, no package manager, no libc.
FROM gcr.io/distroless/static-debian12:nonroot AS base
COPY --from=build /out/opjournal /out/opjournal-reconciler /out/opjournal-gateway /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/data /var/lib/opjournal
USER 65532:65532
WORKDIR /var/lib/opjournal
# The serve defaults for a container. Secure by default: the tokens file is
# required (serve refuses to start when it is missing), so a container never
# listens on 0.0.0.0 without authentication. To try it out without tokens,
# run `-e OPJOURNAL_AUTH_FILE= … serve --insecure`, and only where nobody
# else can reach the ports.
# OPJOURNAL_HTTP_ADDR is also opjournal-gateway's --http-addr: a gateway
# started from this image serves its HTTP front door on 0.0.0.0:8080 unless
# it is given another --http-addr (or OPJOURNAL_HTTP_ADDR=, which turns it off).
ENV OPJOURNAL_GRPC_ADDR=0.0.0.0:9090 \
    OPJOURNAL_HTTP_ADDR=0.0.0.0:8080 \
    OPJOURNAL_DATABASE_URL=sqlite:///var/lib/opjournal/opjournal.db \
    OPJOURNAL_AUTH_FILE=/etc/opjournal/auth.yaml
# The SQLite database, its WAL and the request-hash key file serve creates
# beside it on the first start (opjournal.db.hashkeys). Unused on PostgreSQL.
VOLUME ["/var/lib/opjournal"]
# 9090: gRPC (JournalService, grpc.health.v1, reflection).
# 8080: REST, the operators' console at /console/, /metrics, /healthz.
EXPOSE 9090 8080
ENTRYPOINT ["/usr/local/bin/opjournal"]
CMD ["serve"]

# ---- demo: the base plus the test provider ---------------------------------
# For compose's demo profile and trying the reconciler: opjournal-fakeprovider
# is a fake payment/email provider with fault injection, never for production.
# The test provider is a harness (harness/go.mod), built in its own stage so
# the runtime image's build never reads the harness module.
FROM build AS build-demo
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go -C harness build -trimpath -ldflags='-s -w' -o /out/ ./cmd/opjournal-fakeprovider

FROM base AS demo
COPY --from=build-demo /out/opjournal-fakeprovider /usr/local/bin/

# ---- runtime: the default target (last stage) -------------------------------
FROM base AS runtime
ARG VERSION=dev
LABEL org.opencontainers.image.title="opjournal" \
      org.opencontainers.image.description="The operation journal for AI agents' irreversible actions" \
      org.opencontainers.image.source="https://github.com/opjournal/opjournal" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
