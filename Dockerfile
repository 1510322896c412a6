# syntax=docker/dockerfile:1
# The RezusCloud server image: rezuscloud and rezusctl, OpenTofu and the
# provider mirror (talos, openstack, hcloud, emulated) built from the Go module
# proxy, on a distroless base (no shell, no package manager), as a non-root user
# with its data under the /data volume. docs/operations.md shows how to run it.
#
#   docker build -t rezuscloud --build-arg COMMIT="$(git rev-parse HEAD)" .
#
# The version is internal/buildinfo/VERSION's, embedded by the build;
# --build-arg VERSION=... stamps another (a prerelease's name, say).
#   docker run -p 8080:8080 -v rezuscloud-data:/data rezuscloud

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
# Everything static: the base image has no C library.
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false REZUS_TOOLS_DIR=/tools
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# OpenTofu and the provider mirror, pinned by hack/tools.sh.
RUN bash hack/tools.sh
ARG VERSION=
ARG COMMIT=unknown
ARG DATE=unknown
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" \
      -o /out/ ./cmd/rezuscloud ./cmd/rezusctl \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rezuscloud /out/rezusctl /usr/local/bin/
COPY --from=build /tools/bin/tofu /usr/local/bin/tofu
COPY --from=build /tools/mirror /usr/share/rezuscloud/providers
# /data is the nonroot user's (65532), also when a fresh volume is mounted on it.
COPY --from=build --chown=65532:65532 /out/data /data
ENV REZUSCLOUD_LISTEN=0.0.0.0:8080 \
    REZUSCLOUD_DATA_DIR=/data \
    REZUSCLOUD_TOFU=/usr/local/bin/tofu \
    REZUSCLOUD_PROVIDER_MIRROR=/usr/share/rezuscloud/providers
USER 65532:65532
VOLUME ["/data"]
# 8080: HTTP (API, web UI, tofu's state backend); 6222: NATS routes between replicas.
EXPOSE 8080 6222
ENTRYPOINT ["/usr/local/bin/rezuscloud"]
CMD ["serve"]
