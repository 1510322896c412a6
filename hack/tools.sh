#!/usr/bin/env bash
# tools.sh builds the pinned OpenTofu toolchain that applies and tests run
# with, from the Go module proxy only (no release downloads), into
# ${REZUS_TOOLS_DIR:-.tools} (a relative path is taken from the repository
# root, as internal/tofutest does):
#
#   bin/tofu                      OpenTofu
#   mirror/<host>/<namespace>/<type>/<version>/<os>_<arch>/terraform-provider-<type>_v<version>
#                                 a provider filesystem mirror (unpacked layout)
#   tofurc                        a CLI config installing the mirror's providers from it
#                                 (TF_CLI_CONFIG_FILE=<dir>/tofurc), and every other one directly
#   stamps/<name>                 what each binary was built from: a matching stamp skips its build
#   logs/<name>.log               the last build's output
#
# Run it as `go tool task tools`. Environment:
#   REZUS_TOOLS_DIR   where to build (default .tools)
#   REZUS_TOOLS_JOBS  how many builds run at once (default 2). Each go build
#                     compiles packages in parallel already, but its links and
#                     the tail of its package graph leave a core idle: on 2
#                     cores with an empty build cache the set took 7m04s with
#                     2 and 8m27s with 1 (before hcloud joined it; hcloud alone
#                     took 3m57s from an empty build cache on a loaded machine,
#                     78s with the other providers' packages cached). With a
#                     warm build cache it is ~20s (links), and with matching
#                     stamps under a second.
#
# OpenTofu's and the talos provider's go.mod carry replace directives, so
# `go install mod@version` refuses them: each third-party module is copied out
# of the module cache and built in place against its own go.mod and go.sum.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"
tools=${REZUS_TOOLS_DIR:-.tools}
[[ $tools == /* ]] || tools=$root/$tools
mkdir -p "$tools"
tools=$(cd "$tools" && pwd -P) # the real path: tofurc names it
parallel=${REZUS_TOOLS_JOBS:-2}
platform=$(go env GOOS)_$(go env GOARCH)
gover=$(go env GOVERSION)
mirror=$tools/mirror

# The pinned versions. The emulated provider's must match
# emulator/tfprovider.Version; the generated configurations pin all of them.
TOFU_VERSION=1.10.10
TALOS_PROVIDER_VERSION=0.8.0
OPENSTACK_PROVIDER_VERSION=3.4.0
HCLOUD_PROVIDER_VERSION=1.52.0
EMULATED_PROVIDER_VERSION=0.1.0
REZUSCLOUD_PROVIDER_VERSION=0.1.0 # tfprovider.Version
export GOWORK=off
mkdir -p "$tools/bin" "$tools/stamps" "$tools/logs" "$mirror"


# up_to_date NAME OUT STAMP succeeds when OUT exists and was built from STAMP.
up_to_date() {
	[[ -x $2 && -f $tools/stamps/$1 && "$(cat "$tools/stamps/$1")" == "$3" ]]
}


# build_module NAME MODULE VERSION PACKAGE OUT [LDFLAGS] builds PACKAGE of
# MODULE@VERSION into OUT.
build_module() {
	local name=$1 module=$2 version=$3 pkg=$4 out=$5 ldflags=${6:-}
	local stamp="$module@$version $gover $platform" start src work
	if up_to_date "$name" "$out" "$stamp"; then
		echo "$name: up to date ($module@$version)"
		return 0
	fi
	start=$(now)
	src=$(module_dir "$module" "$version")
	work=$tools/build/$name
	rm -rf "$work"
	mkdir -p "$tools/build" "$(dirname "$out")"
	cp -R "$src" "$work"
	chmod -R u+w "$work"
	(cd "$work" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
	mv -f "$out.tmp" "$out"
	printf '%s\n' "$stamp" >"$tools/stamps/$name"
	rm -rf "$work"
	echo "$name: built $module@$version in $(since "$start")"
}

# build_local NAME PACKAGE OUT builds this repository's PACKAGE (a provider)
# into OUT. Its stamp is a hash of the sources of every package of this
# module it is made of and of the versions of the modules it links, so an
# edit elsewhere does not rebuild it.
build_local() {
	local name=$1 pkg=$2 out=$3 start stamp rel
	local -a dirs
	mapfile -t dirs < <(cd "$root" && go list -deps -f '{{with .Module}}{{if .Main}}{{$.Dir}}{{end}}{{end}}' "$pkg")
	stamp=$(
		cd "$root"
		go list -deps -f '{{with .Module}}{{.Path}}@{{.Version}}{{end}}' "$pkg" | sort -u
		# Paths relative to the root: a copy of the repository elsewhere
		# (the README test's) has the same stamp.
		for d in "${dirs[@]}"; do
			rel=${d#"$root"}
			rel=${rel#/}
			find "${rel:-.}" -maxdepth 1 -name '*.go' ! -name '*_test.go' -print0 | sort -z | xargs -0 sha256sum
		done
		echo "$gover $platform"
	)
	stamp=$(sha256sum <<<"$stamp" | cut -d' ' -f1)
	if up_to_date "$name" "$out" "$stamp"; then
		echo "$name: up to date"
		return 0
	fi
	start=$(now)
	mkdir -p "$(dirname "$out")"
	(cd "$root" && go build -trimpath -o "$out.tmp" "$pkg")
	mv -f "$out.tmp" "$out"
	printf '%s\n' "$stamp" >"$tools/stamps/$name"
	echo "$name: built in $(since "$start")"
}

# provider_path HOST/NAMESPACE/TYPE VERSION prints the provider's binary path in the mirror.
provider_path() {
	printf '%s/%s/%s/%s/terraform-provider-%s_v%s\n' "$mirror" "$1" "$2" "$platform" "${1##*/}" "$2"
}

build_tofu() {
	build_module tofu github.com/opentofu/opentofu "v$TOFU_VERSION" ./cmd/tofu "$tools/bin/tofu" \
		-X=github.com/opentofu/opentofu/version.dev=no
}

build_talos() {
	GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/siderolabs/terraform-provider-talos" \
		build_module talos github.com/siderolabs/terraform-provider-talos "v$TALOS_PROVIDER_VERSION" . \
		"$(provider_path registry.opentofu.org/siderolabs/talos "$TALOS_PROVIDER_VERSION")"
}

build_openstack() {
	build_module openstack github.com/terraform-provider-openstack/terraform-provider-openstack/v3 "v$OPENSTACK_PROVIDER_VERSION" . \
		"$(provider_path registry.opentofu.org/terraform-provider-openstack/openstack "$OPENSTACK_PROVIDER_VERSION")"
}

# hcloud is not used by RezusCloud itself: examples/providers/hcloud, a
# module provider for Hetzner Cloud, is validated against it
# (tfrunner/example_hcloud_test.go). The checksum database, reached through
# the proxy, does not answer for the module (404), so it is downloaded
# without it, as talos is; its go.sum still pins every dependency. Its
# version is set at link time as its release builds set it (.goreleaser.yml),
# since the provider reports it.
build_hcloud() {
	GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/hetznercloud" \
		build_module hcloud github.com/hetznercloud/terraform-provider-hcloud "v$HCLOUD_PROVIDER_VERSION" . \
		"$(provider_path registry.opentofu.org/hetznercloud/hcloud "$HCLOUD_PROVIDER_VERSION")" \
		"-X=github.com/hetznercloud/terraform-provider-hcloud/hcloud.Version=$HCLOUD_PROVIDER_VERSION"
}

build_emulated() {
	build_local emulated ./cmd/terraform-provider-emulated "$(provider_path registry.opentofu.org/rezuscloud/emulated "$EMULATED_PROVIDER_VERSION")"
}

# rezuscloud is RezusCloud's own provider (tfprovider): users declare
# tenants with it; examples/terraform runs it from the mirror.
build_rezuscloud() {
	build_local rezuscloud ./cmd/terraform-provider-rezuscloud "$(provider_path registry.opentofu.org/rezuscloud/rezuscloud "$REZUSCLOUD_PROVIDER_VERSION")"
}

# The builds, longest first so the short ones fill in beside it.
names=(tofu talos hcloud openstack emulated rezuscloud)
total=$(now)
declare -A pids=()
failed=()
for name in "${names[@]}"; do
	while (($(jobs -rp | wc -l) >= parallel)); do
		wait -n || true
	done
	"build_$name" >"$tools/logs/$name.log" 2>&1 &
	pids[$name]=$!
done
for name in "${names[@]}"; do
	if wait "${pids[$name]}"; then
		tail -n 1 "$tools/logs/$name.log" # the summary; the log keeps the rest
	else
		failed+=("$name")
		echo "$name: FAILED (log: $tools/logs/$name.log)" >&2
		tail -n 30 "$tools/logs/$name.log" >&2
	fi
done
rm -rf "$tools/build"
if ((${#failed[@]})); then
	echo "tools: ${failed[*]} failed after $(since "$total")" >&2
	exit 1
fi

# The CLI config: the mirror's providers come only from the mirror, every
# other one from its registry as usual.
includes=$(cd "$mirror" && find . -mindepth 3 -maxdepth 3 -type d | sed 's|^\./||' | sort | sed 's/.*/"&"/' | paste -sd, - | sed 's/,/, /g')
cat >"$tools/tofurc.tmp" <<EOF
# Written by hack/tools.sh: install the providers built into the mirror from it.
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = [$includes]
  }
  direct {
    exclude = [$includes]
  }
}
EOF
mv -f "$tools/tofurc.tmp" "$tools/tofurc"
echo "tools: ready in $tools after $(since "$total") (TF_CLI_CONFIG_FILE=$tools/tofurc)"
