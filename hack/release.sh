#!/usr/bin/env bash
# Builds the release binaries into dist/ (go tool task release):
#
#   dist/rezuscloud-<os>-<arch>, dist/rezusctl-<os>-<arch>   for each platform below
#   dist/terraform-provider-rezuscloud_v<provider version>-<os>-<arch>
#                                                             the OpenTofu provider (docs/terraform.md)
#   dist/SHA256SUMS                                           sha256sum format, one line a binary
#
# Static (CGO_ENABLED=0), -trimpath, and stamped with -ldflags -X:
# main.version ($VERSION, else internal/buildinfo/VERSION, the release this
# tree is, which a plain build embeds too), main.commit (git rev-parse HEAD)
# and main.date (RFC 3339 UTC: $SOURCE_DATE_EPOCH when set,
# for reproducible builds, else now). `rezuscloud --version` and `rezusctl
# version --client` print them; the binaries for this machine's platform are
# run once to check that they do.
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=(${PLATFORMS:-linux/amd64 linux/arm64 darwin/arm64})
version=${VERSION:-$(cat internal/buildinfo/VERSION)}
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
else
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
fi
ldflags="-s -w -X main.version=$version -X main.commit=$commit -X main.date=$date"

rm -rf dist
mkdir -p dist
for p in "${platforms[@]}"; do
  os=${p%/*} arch=${p#*/}
  for cmd in rezuscloud rezusctl; do
    out="dist/$cmd-$os-$arch"
    echo "== $out ($version, $commit)"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$out" "./cmd/$cmd"
  done
done
# The provider has a version of its own (tfprovider.Version, which
# hack/tools.sh lays out in the mirror).
provider_version=$(sed -n 's/^REZUSCLOUD_PROVIDER_VERSION=\([^ ]*\).*/\1/p' hack/tools.sh)
for p in "${platforms[@]}"; do
  os=${p%/*} arch=${p#*/}
  out="dist/terraform-provider-rezuscloud_v$provider_version-$os-$arch"
  echo "== $out"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$out" ./cmd/terraform-provider-rezuscloud
done
(cd dist && sha256sum -- rezuscloud-* rezusctl-* terraform-provider-rezuscloud_* > SHA256SUMS)
cat dist/SHA256SUMS

# The binaries of this platform run, are static, and say what they are.
host="$(go env GOOS)-$(go env GOARCH)"
if [ -x "dist/rezuscloud-$host" ]; then
  want="$version (commit $commit, built $date,"
  got=$("dist/rezuscloud-$host" --version)
  [[ "$got" == *"$want"* ]] || { echo "rezuscloud --version says \"$got\", not \"$want ...\""; exit 1; }
  got=$("dist/rezusctl-$host" version --client)
  [[ "$got" == *"$want"* ]] || { echo "rezusctl version --client says \"$got\", not \"$want ...\""; exit 1; }
  if [ "$(go env GOOS)" = linux ] && command -v readelf >/dev/null 2>&1; then
    for b in "dist/rezuscloud-$host" "dist/rezusctl-$host"; do
      if readelf -l "$b" | grep -q INTERP; then echo "$b is dynamically linked"; exit 1; fi
    done
  fi
  echo "== dist/*-$host: $got; static"
fi
