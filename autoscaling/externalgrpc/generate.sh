#!/usr/bin/env bash
# generate.sh regenerates externalgrpc.pb.go and externalgrpc_grpc.pb.go from
# externalgrpc.proto (the cluster-autoscaler's, Kubernetes messages as bytes;
# see the proto's header). Needs protoc (Debian: protobuf-compiler) and:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
set -euo pipefail
cd "$(dirname "$0")"
protoc --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative externalgrpc.proto
