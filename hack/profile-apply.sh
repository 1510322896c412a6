#!/usr/bin/env bash
# hack/profile-apply.sh BINDIR OUTDIR [TENANTS] profiles where the CPU of a
# tenant's first apply goes (issue 49): it runs BINDIR's `rezusbench fleet`
# (with BINDIR/rezuscloud) building TENANTS tenants (default 8) of one
# control plane and two workers, records every process of the machine with
# `perf record -a -g` until the fleet is built, and sums the samples by
# process (the server, the emulator, the sandbox launcher, tofu, each
# provider plugin) and by phase within them (`rezusbench cpu-phases`).
#
# The machine must be quiet: the recording is system-wide, and every tofu
# and provider process counts. For symbols, tofu must be built unstripped:
#
#   TOFU=/path/to/unstripped/tofu hack/profile-apply.sh bin /tmp/profile-after
#
# (hack/tools.sh strips it; build one as it does without `-s -w`.) PHASES
# is the rezusbench that sums the samples (default BINDIR's; a BINDIR of a
# commit before cpu-phases needs this one's). Needs
# perf (Debian: linux-perf) and root or kernel.perf_event_paranoid <= 0.
set -euo pipefail

bindir=$(cd "${1:?usage: $0 BINDIR OUTDIR [TENANTS]}" && pwd)
out=${2:?usage: $0 BINDIR OUTDIR [TENANTS]}
tenants=${3:-8}
tools=${REZUS_TOOLS_DIR:-.tools}
tofu=${TOFU:-$tools/bin/tofu}
mirror=${PROVIDER_MIRROR:-$tools/mirror}
mkdir -p "$out"
out=$(cd "$out" && pwd)
unset TF_CLI_CONFIG_FILE

command -v perf >/dev/null || { echo "perf is not installed (Debian: apt-get install linux-perf)" >&2; exit 1; }

perf record -a -g -F 499 -o "$out/perf.data" 2>"$out/perf.log" &
perfpid=$!
"$bindir/rezusbench" --server "$bindir/rezuscloud" fleet --tenants "$tenants" --parallel "$tenants" \
	--waves 100% --soak 0s --tofu "$tofu" --provider-mirror "$mirror" >"$out/bench.log" 2>&1 &
benchpid=$!
trap 'kill -INT "$perfpid" 2>/dev/null || true' EXIT

# The server's and the emulator's pids, while they run: perf names
# processes by command only, and both are rezuscloud.
roles=()
while kill -0 "$benchpid" 2>/dev/null; do
	if grep -q "built:" "$out/bench.log"; then
		break
	fi
	if ((${#roles[@]} == 0)) && grep -q "^fleet:" "$out/bench.log"; then
		for p in $(pgrep -f "$bindir/rezuscloud serve" || true); do roles+=(--role "$p=server"); done
		for p in $(pgrep -f "$bindir/rezuscloud (emulator|--emulator)" || true); do roles+=(--role "$p=emulator"); done
	fi
	sleep 0.2
done
printf "%s\n" "${roles[@]}" >"$out/roles"
grep -q "built:" "$out/bench.log" || { cat "$out/bench.log" >&2; echo "the fleet was not built" >&2; exit 1; }
kill -INT "$perfpid"
wait "$perfpid" || true
trap - EXIT
# The bench goes on to its rollout; it cleans up after itself.
wait "$benchpid" || echo "the fleet bench failed after the build: $out/bench.log" >&2
sed -n '/^fleet:/,/built:/p' "$out/bench.log"
# The process id, not the thread's: the server's samples are of its threads.
perf script -i "$out/perf.data" -F comm,pid,time,period,event,ip,sym,dso 2>/dev/null |
	"${PHASES:-$bindir/rezusbench}" cpu-phases --tenants "$tenants" "${roles[@]}" | tee "$out/phases.md"
