#!/usr/bin/env bash
# autoscaler.sh builds the real Kubernetes cluster-autoscaler, pinned below,
# from the Go module proxy only, into ${REZUS_TOOLS_DIR:-.tools}:
#
#   autoscaler/<version>/cluster-autoscaler
#                         the autoscaler with only its externalgrpc cloud
#                         provider, the one RezusCloud serves (issue 48)
#   stamps/autoscaler-<version>, logs/autoscaler.log
#
# Tests run it as a process against an emulated cluster's real kube-apiserver
# and RezusCloud's externalgrpc service: an autoscaler nobody here wrote
# judges whether we serve its contract.
#
# cluster-autoscaler 1.33.0 has no tag of its own on the proxy; its commit is
# the pseudo-version below. Its go.mod replaces the nested module
# k8s.io/autoscaler/cluster-autoscaler/apis with ./apis, a directory its
# module zip does not hold. So the module is copied out of the module cache,
# that replace is dropped and a served version of the apis module required
# instead: the one its go.mod names (d52e4b9665d7, June 2024) has
# ProvisioningRequest v1beta1 only, while the code imports v1; adfbe7e45277
# (August 2024, the one Kueue requires) has v1 and everything the code uses,
# and needs nothing newer than the autoscaler's own k8s.io v0.33.1 modules, so
# no source file is edited. Its other replaces point at published v0.33.1 tags
# and stay. k8s.io/kubernetes v1.33.1, which it requires, replaces its
# staging modules only in its own go.mod, which go ignores for a dependency.
#
# The build tag keeps only the externalgrpc provider, as upstream's
# `make build BUILD_TAGS=externalgrpc` does: the default build also links 28
# other providers and their clouds' SDKs (164 MiB and 2.3x the CPU time here,
# docs/emulator.md). The version needs no stamp: the autoscaler's own
# (version.ClusterAutoscalerVersion, logged at start) is a constant in its
# source, and upstream's Makefile stamps nothing either.
#
# Run it as `go tool task tools:autoscaler`. A matching stamp skips the build.
set -euo pipefail

AUTOSCALER_VERSION=1.33.0
AUTOSCALER_MODULE=k8s.io/autoscaler/cluster-autoscaler
AUTOSCALER_PSEUDO=v0.0.0-20250613073258-1959f5f61f6c
APIS_MODULE=k8s.io/autoscaler/cluster-autoscaler/apis
APIS_VERSION=v0.0.0-20240830133931-adfbe7e45277
TAGS=externalgrpc

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"
tools=${REZUS_TOOLS_DIR:-.tools}
[[ $tools == /* ]] || tools=$root/$tools
mkdir -p "$tools/stamps" "$tools/logs"
tools=$(cd "$tools" && pwd -P)
out=$tools/autoscaler/$AUTOSCALER_VERSION
log=$tools/logs/autoscaler.log
stampfile=$tools/stamps/autoscaler-$AUTOSCALER_VERSION
stamp="$AUTOSCALER_MODULE@$AUTOSCALER_PSEUDO $APIS_MODULE@$APIS_VERSION tags=$TAGS"
stamp+=" $(go env GOVERSION) $(go env GOOS)_$(go env GOARCH)"
export GOWORK=off

if [[ -x $out/cluster-autoscaler && "$(cat "$stampfile" 2>/dev/null)" == "$stamp" ]]; then
	echo "autoscaler $AUTOSCALER_VERSION: up to date"
	exit 0
fi

build() {
	local start src
	start=$(now)
	src=$(module_dir "$AUTOSCALER_MODULE" "$AUTOSCALER_PSEUDO")
	# work is not local: the subshell's EXIT trap removes it after build returns.
	work=$(mktemp -d "$tools/autoscaler-build.XXXXXX")
	trap 'rm -rf "$work" "$out.tmp"' EXIT
	rmdir "$work"
	cp -R "$src" "$work"
	chmod -R u+w "$work"
	(cd "$work" && go mod edit -dropreplace="$APIS_MODULE" -require="$APIS_MODULE@$APIS_VERSION")
	rm -rf "$out.tmp"
	mkdir -p "$out.tmp"
	(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -tags "$TAGS" -trimpath -ldflags "-s -w" \
		-o "$out.tmp/cluster-autoscaler" .)
	rm -rf "$out" && mv "$out.tmp" "$out"
	printf '%s\n' "$stamp" >"$stampfile"
	echo "autoscaler $AUTOSCALER_VERSION: built in $(since "$start") ($(du -sh "$out/cluster-autoscaler" | cut -f1))"
}

# In a subshell outside any condition, so that set -e stops the build at its
# first failure (`if ! build` would ignore it) and the EXIT trap cleans up.
set +e
(
	set -e
	build
) >"$log" 2>&1
rc=$?
set -e
if ((rc != 0)); then
	echo "autoscaler $AUTOSCALER_VERSION: FAILED (log: $log)" >&2
	tail -n 30 "$log" >&2
	exit 1
fi
tail -n 1 "$log"
