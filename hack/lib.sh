# lib.sh: helpers the tool builds share (sourced by tools.sh, talosctl.sh, kube.sh).

# now prints the time in seconds with milliseconds.
now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
# since START prints the seconds elapsed since START, e.g. "12.3s".
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# module_dir MODULE VERSION prints the module's directory in the module
# cache, downloading it from the proxy if needed. It runs outside any module
# so the repository's go.mod and go.sum are left alone.
module_dir() {
	local json dir
	json=$(cd / && GOFLAGS= go mod download -json "$1@$2")
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	if [[ -z $dir || ! -d $dir ]]; then
		echo "go mod download $1@$2 gave no directory:" >&2
		echo "$json" >&2
		return 1
	fi
	printf '%s\n' "$dir"
}
