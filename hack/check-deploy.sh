#!/usr/bin/env bash
# Checks what ships besides the binaries (go tool task lint:deploy, part of lint):
# the Kubernetes manifests with `kubectl apply --dry-run=client` against a
# stand-in discovery API, the systemd unit with systemd-analyze, both against
# serve's flags, and the Dockerfile (cmd/rezuscloud/deploy_test.go); hadolint
# lints the Dockerfile where it is installed.
#
# kubectl is required: a machine without it gets Debian's kubernetes-client
# (apt-get), and where apt has none the check fails saying how to get it.
# hadolint is not packaged by Debian, so without it the check says so and
# goes on.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v kubectl >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && apt-cache policy kubernetes-client 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    echo "== installing kubectl (Debian's kubernetes-client)"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null
  else
    echo "lint:deploy: kubectl is not installed and apt offers no kubernetes-client package;"
    echo "install kubectl (https://kubernetes.io/docs/tasks/tools/) to check deploy/kubernetes"
    exit 1
  fi
fi
echo "== kubectl $(kubectl version --client 2>/dev/null | head -n 1)"

if command -v hadolint >/dev/null 2>&1; then
  hadolint Dockerfile
else
  echo "== note: hadolint is not installed (Debian does not package it): the Dockerfile is checked by TestDockerfile only"
fi

REZUS_REQUIRE_KUBECTL=1 go test -count=1 -run '^(TestDeployManifests|TestDockerfile)$' ./cmd/rezuscloud/
