#!/usr/bin/env bash
# kube.sh builds the real control plane the emulator runs on its control-plane
# nodes, from the Go module proxy only, into ${REZUS_TOOLS_DIR:-.tools}:
#
#   kube/<version>/kube-apiserver, kube-controller-manager, kube-scheduler
#                         for each Kubernetes version in KUBE_VERSIONS
#   etcd/<version>/etcd, etcdutl
#                         etcd (the nearest served release to the one Talos
#                         v1.13 ships, v3.6.9) and its offline tool (restore)
#   stamps/kube-<version>, stamps/etcd-<version>
#
# k8s.io/kubernetes replaces its 33 k8s.io/* staging modules with
# ./staging/... directories its module zip does not hold, and etcd's modules
# replace their siblings with ../ directories: each is copied out of the
# module cache, the replaces are dropped, the published tags are required
# instead, and the commands are built in place (-mod=mod). The version is
# stamped at link time as Kubernetes' hack/lib/version.sh does, or the
# binaries would say v0.0.0-master.
#
# Run it as `go tool task tools` (or `go tool task tools:kube`).
set -euo pipefail

KUBE_VERSIONS=(1.35.4 1.36.1)
ETCD_VERSION=3.6.16

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"
tools=${REZUS_TOOLS_DIR:-.tools}
[[ $tools == /* ]] || tools=$root/$tools
mkdir -p "$tools/stamps" "$tools/logs"
tools=$(cd "$tools" && pwd -P)
gover=$(go env GOVERSION)
platform=$(go env GOOS)_$(go env GOARCH)
export GOWORK=off



# unreplace DIR PATTERN TAG drops every replace of DIR's go.mod whose target
# is a local directory matching PATTERN and requires the module at TAG.
unreplace() {
	local dir=$1 pattern=$2 tag=$3 mod
	local -a args=()
	while read -r mod; do
		args+=("-dropreplace=$mod" "-require=$mod@$tag")
	done < <(awk -v p="$pattern" '/=>/ {
		split($0, side, "=>"); l = side[1]; r = side[2]
		sub(/^[[:space:]]*(replace[[:space:]]+)?/, "", l); sub(/[[:space:]].*$/, "", l)
		sub(/^[[:space:]]+/, "", r)
		if (r ~ p) print l
	}' "$dir/go.mod")
	((${#args[@]})) && (cd "$dir" && go mod edit "${args[@]}")
	return 0
}

build_kube() {
	local v=$1 out=$tools/kube/$1 stamp="k8s.io/kubernetes@v$1 $gover $platform" start src work ld
	if [[ -x $out/kube-apiserver && -x $out/kube-controller-manager && -x $out/kube-scheduler &&
		"$(cat "$tools/stamps/kube-$v" 2>/dev/null)" == "$stamp" ]]; then
		echo "kube $v: up to date"
		return 0
	fi
	start=$(now)
	src=$(module_dir k8s.io/kubernetes "v$v")
	work=$tools/kube-build-$v
	rm -rf "$work"
	cp -R "$src" "$work"
	chmod -R u+w "$work"
	unreplace "$work" '^\./staging/' "v0.${v#1.}"
	local major=${v%%.*} minor=${v#*.}
	minor=${minor%%.*}
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=v$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	mkdir -p "$out.tmp"
	(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$out.tmp/" \
		./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler)
	rm -rf "$out" && mv "$out.tmp" "$out"
	printf '%s\n' "$stamp" >"$tools/stamps/kube-$v"
	rm -rf "$work"
	echo "kube $v: built in $(since "$start") ($(du -sh "$out" | cut -f1))"
}

build_etcd() {
	local v=$ETCD_VERSION out=$tools/etcd/$ETCD_VERSION stamp="go.etcd.io/etcd@v$ETCD_VERSION $gover $platform" start src work
	if [[ -x $out/etcd && -x $out/etcdutl && "$(cat "$tools/stamps/etcd-$v" 2>/dev/null)" == "$stamp" ]]; then
		echo "etcd $v: up to date"
		return 0
	fi
	start=$(now)
	mkdir -p "$out.tmp"
	local name mod pkg
	for name in etcd etcdutl; do
		case $name in
		etcd) mod=go.etcd.io/etcd/server/v3 ;;
		etcdutl) mod=go.etcd.io/etcd/etcdutl/v3 ;;
		esac
		src=$(module_dir "$mod" "v$v")
		work=$tools/etcd-build-$name
		rm -rf "$work"
		cp -R "$src" "$work"
		chmod -R u+w "$work"
		unreplace "$work" '^\.\./' "v$v"
		# Replaces to a forbidden directory guard etcd's repository, not a build.
		(cd "$work" && sed -i '/FORBIDDEN_DEPENDENCY/d' go.mod &&
			CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out.tmp/$name" .)
		rm -rf "$work"
	done
	rm -rf "$out" && mv "$out.tmp" "$out"
	printf '%s\n' "$stamp" >"$tools/stamps/etcd-$v"
	echo "etcd $v: built in $(since "$start")"
}

total=$(now)
build_etcd
for v in "${KUBE_VERSIONS[@]}"; do
	build_kube "$v"
done
echo "kube tools: $(since "$total")"
