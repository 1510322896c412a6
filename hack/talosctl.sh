#!/usr/bin/env bash
# talosctl.sh builds the real talosctl, pinned below, from the Go module proxy
# only into ${REZUS_TOOLS_DIR:-.tools}/bin/talosctl (a relative path is taken
# from the repository root, as hack/tools.sh and internal/tofutest do). The
# emulator's conformance test (emulator/talosctl_conformance_test.go)
# runs it against emulated nodes: a client nobody here wrote keeps the
# emulator honest.
#
# Run it as `go tool task tools:talosctl` (`go tool task tools` runs it too).
# A stamp (stamps/talosctl) records what the binary was built from, so a
# matching one skips the build; logs/talosctl.log keeps the last build's
# output. An empty build cache takes about 4 minutes on 2 cores.
#
# talosctl lives in the main Talos module, whose go.mod cannot be built as
# `go install mod@version`: it replaces pkg/machinery with ./pkg/machinery (a
# separate module, absent from the main module's zip) and containerd/v2 with
# a fork that is not on the proxy. So the module is copied out of the module
# cache, the machinery module of the same version copied into pkg/machinery,
# and the containerd replace dropped (upstream v2.2.2, the required version,
# builds talosctl; the fork only fixes dead-code elimination in talosd).
set -euo pipefail

TALOSCTL_VERSION=v1.13.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"
tools=${REZUS_TOOLS_DIR:-.tools}
[[ $tools == /* ]] || tools=$root/$tools
mkdir -p "$tools/bin" "$tools/stamps" "$tools/logs"
tools=$(cd "$tools" && pwd -P) # the real path: tofurc names it
out=$tools/bin/talosctl
stamp="github.com/siderolabs/talos@$TALOSCTL_VERSION $(go env GOVERSION) $(go env GOOS)_$(go env GOARCH)"
export GOWORK=off

if [[ -x $out && -f $tools/stamps/talosctl && "$(cat "$tools/stamps/talosctl")" == "$stamp" ]]; then
	echo "talosctl: up to date ($TALOSCTL_VERSION)"
	exit 0
fi


build() {
	local start=$EPOCHSECONDS src machinery
	# work is not local: the subshell's EXIT trap removes it after build returns.
	src=$(module_dir github.com/siderolabs/talos "$TALOSCTL_VERSION")
	machinery=$(module_dir github.com/siderolabs/talos/pkg/machinery "$TALOSCTL_VERSION")
	# Not under $tools/build, which hack/tools.sh removes when it ends.
	work=$(mktemp -d "$tools/talosctl-build.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	rmdir "$work"
	cp -R "$src" "$work"
	chmod -R u+w "$work"
	rm -rf "$work/pkg/machinery"
	cp -R "$machinery" "$work/pkg/machinery"
	chmod -R u+w "$work/pkg/machinery"
	sed -i '/^replace github.com\/containerd\/containerd\/v2 => /d' "$work/go.mod"
	# The fork's go.sum lines stay; -mod=mod lets go add upstream's if missing.
	(cd "$work" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$out.tmp" ./cmd/talosctl)
	mv -f "$out.tmp" "$out"
	printf '%s\n' "$stamp" >"$tools/stamps/talosctl"
	echo "talosctl: built github.com/siderolabs/talos@$TALOSCTL_VERSION in $((EPOCHSECONDS - start))s"
}

# In a subshell outside any condition, so that set -e stops the build at its
# first failure (`if ! build` or `build || …` would ignore it) and the EXIT
# trap removes the work dir.
set +e
(
	set -e
	build
) >"$tools/logs/talosctl.log" 2>&1
rc=$?
set -e
if ((rc != 0)); then
	echo "talosctl: FAILED (log: $tools/logs/talosctl.log)" >&2
	tail -n 30 "$tools/logs/talosctl.log" >&2
	exit 1
fi
tail -n 1 "$tools/logs/talosctl.log"
