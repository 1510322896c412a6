#!/usr/bin/env bash
# bench-check.sh is the performance regression gate (`go tool task
# bench:check`). It builds the server of the commit docs/benchmarks.json
# records (its "commit") from a git worktree, and the server of the code under
# test, then runs `rezusbench ab`: both are measured on this machine in this
# run, in turns (A B, B A, A B), and the gate fails only when the code under
# test is clearly slower than that base (a write path's median ratio below
# 0.75x the base's, confirmed by two more rounds). Figures recorded on another
# machine or day are never a floor: hosts differ (issue 26).
#
# The base binary is cached by commit and Go version under
# ${REZUS_TOOLS_DIR:-.tools}/bench-base, so a second run only builds the code
# under test. Environment:
#   REZUS_BENCH_ARGS   more arguments for `rezusbench ab` (e.g. --rounds 5)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tools=${REZUS_TOOLS_DIR:-.tools}
[[ $tools == /* ]] || tools=$root/$tools

commit=$(sed -n 's/^ *"commit": *"\([0-9a-f]\{7,40\}\)".*/\1/p' docs/benchmarks.json)
if [[ -z $commit ]]; then
	echo "bench-check: docs/benchmarks.json names no \"commit\": record one with" >&2
	echo "  rezusbench api --record docs/benchmarks.json --commit \$(git rev-parse HEAD)" >&2
	exit 1
fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
	echo "bench-check: the base commit $commit (docs/benchmarks.json) is not in this clone;" >&2
	echo "  a shallow clone lacks it: git fetch --unshallow (or --deepen) and run again" >&2
	exit 1
fi
commit=$(git rev-parse "$commit^{commit}")

base_dir=$tools/bench-base/$commit-$(go env GOVERSION)
base=$base_dir/rezuscloud
if [[ ! -x $base ]]; then
	echo "== building the base server of $commit (docs/benchmarks.json) into $base_dir"
	work=$(mktemp -d "${TMPDIR:-/tmp}/rezus-bench-base-XXXXXX")
	cleanup() { git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"; }
	trap cleanup EXIT
	git worktree add --detach --quiet "$work/src" "$commit"
	mkdir -p "$base_dir"
	(cd "$work/src" && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go build -o "$work/rezuscloud" ./cmd/rezuscloud)
	mv "$work/rezuscloud" "$base"
	cleanup
	trap - EXIT
fi

mkdir -p bin
go build -o bin/ ./cmd/rezuscloud ./cmd/rezusbench
# shellcheck disable=SC2086 # REZUS_BENCH_ARGS is a list of arguments
bin/rezusbench --server bin/rezuscloud ab --base "$base" ${REZUS_BENCH_ARGS:-}
