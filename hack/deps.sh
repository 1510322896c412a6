#!/usr/bin/env bash
# deps.sh installs what the tests need that this machine lacks (`go tool task
# deps`, the first step of `go tool task test`): headless Chromium for the web
# UI's browser tests, node and npm to rebuild the UI's assets, QEMU and
# qemu-img for `rezusctl boot --platform qemu`, kubectl to judge the
# emulated clusters' real Kubernetes API. Each comes from the Debian
# archive, and only when its command is missing: a machine whose node comes
# from elsewhere keeps it (asking apt for nodejs there fails on held packages).
# Everything else the tests use is built from the Go module proxy (go.mod
# pins it; `go tool task tools` builds tofu, the providers and talosctl).
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v qemu-img >/dev/null 2>&1 || need+=(qemu-utils)
command -v kubectl >/dev/null 2>&1 || need+=(kubectl)
if [ ${#need[@]} -gt 0 ]; then
	echo "== installing ${need[*]} (Debian packages the tests need)"
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then
		if ! command -v sudo >/dev/null 2>&1; then
			echo "deps: the tests need ${need[*]}: install them (apt-get install ${need[*]}) or run as root" >&2
			exit 1
		fi
		SUDO="sudo"
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "deps: the tests need ${need[*]} and this machine has no apt-get: install them with its package manager" >&2
		exit 1
	fi
	$SUDO apt-get update -qq
	if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
		echo "deps: apt-get could not install ${need[*]}: install them by hand and run again" >&2
		exit 1
	fi
fi
echo "== chromium: $(chromium --version 2>/dev/null || echo missing); node $(node --version); npm $(npm --version); $(qemu-system-x86_64 --version | head -1); $(kubectl version --client 2>/dev/null | head -1)"
