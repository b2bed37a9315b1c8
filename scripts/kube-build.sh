#!/usr/bin/env bash
# Builds a real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler) from Debian bookworm's `kubernetes` source package, for the real-member
# tests (docs/real-kubernetes.md). Nothing is downloaded but Debian packages.
#
#   scripts/kube-build.sh          # prints the directory holding the three binaries
#
# The result is cached outside the clone, keyed by the source package's version, so a second
# run costs nothing: $FLOTILLA_KUBE_CACHE (default ~/.cache/flotilla/kubernetes)/<version>/bin.
# A cold build takes about 7 minutes on 2 cores, 1.3 GB of memory and 1.5 GB of Go cache.
#
# Why these steps (each was needed on Debian bookworm with Go 1.19):
#   - GOPATH mode (GO111MODULE=off): module mode with -mod=vendor fails on Go 1.19;
#   - `make gen_openapi`: the tarball lacks pkg/generated/openapi/zz_generated.openapi.go;
#   - the vendored modern-go/reflect2 v1.0.1 segfaults under Go >= 1.18 on the first JSON
#     encode of a map; Debian's golang-github-modern-go-reflect2-dev (1.0.2) replaces it.
set -euo pipefail

VERSION="${FLOTILLA_KUBE_VERSION:-1.20.5+really1.20.2-1.1+deb12u1}"
# the upstream release inside that package, stamped into the binaries (`/version`)
UPSTREAM="${VERSION#*really}"; UPSTREAM="v${UPSTREAM%%-*}"
# bumped when the build steps change, so that a cache built by older steps is rebuilt
RECIPE=2
CACHE="${FLOTILLA_KUBE_CACHE:-$HOME/.cache/flotilla/kubernetes}"
OUT="$CACHE/$VERSION"
BINS=(kube-apiserver kube-controller-manager kube-scheduler)

say() { printf '==> kube-build: %s\n' "$*" >&2; }

have_all() {
  [ "$(cat "$OUT/bin/.recipe" 2>/dev/null)" = "$RECIPE" ] || return 1
  for b in "${BINS[@]}"; do [ -x "$OUT/bin/$b" ] || return 1; done
}
if have_all; then
  echo "$OUT/bin"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

# Debian's source index for bookworm main, added once.
SRC_LIST=/etc/apt/sources.list.d/flotilla-bookworm-src.sources
if [ ! -e "$SRC_LIST" ]; then
  say "adding a deb-src entry for bookworm main ($SRC_LIST)"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    | $SUDO tee "$SRC_LIST" >/dev/null
fi
need=()
command -v go >/dev/null || need+=(golang-go)
command -v rsync >/dev/null || need+=(rsync)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need+=(golang-github-modern-go-reflect2-dev)
say "apt-get update (source index)"
$SUDO apt-get update -qq
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

WORK="$CACHE/build-$VERSION"
mkdir -p "$WORK"
cd "$WORK"
SRC_DIR="$(find . -maxdepth 1 -type d -name 'kubernetes-*' | head -1)"
if [ -z "$SRC_DIR" ]; then
  say "fetching the source package kubernetes=$VERSION"
  apt-get source -qq --download-only "kubernetes=$VERSION" >&2
  dpkg-source --no-check -x ./*.dsc >&2
  SRC_DIR="$(find . -maxdepth 1 -type d -name 'kubernetes-*' | head -1)"
fi
SRC_DIR="$(cd "$SRC_DIR" && pwd)"

export GOPATH="$WORK/gopath"
export GO111MODULE=off CGO_ENABLED=0
export GOCACHE="${GOCACHE:-$CACHE/go-build}"
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$SRC_DIR" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"

# reflect2 1.0.2 from Debian in place of the vendored 1.0.1
if ! grep -q 'func (type2 \*safeType) UnsafeIndirect' vendor/github.com/modern-go/reflect2/safe_type.go 2>/dev/null \
  || [ ! -e vendor/github.com/modern-go/reflect2/.flotilla-replaced ]; then
  say "replacing vendored modern-go/reflect2 with Debian's 1.0.2"
  rsync -a --delete /usr/share/gocode/src/github.com/modern-go/reflect2/ vendor/github.com/modern-go/reflect2/
  touch vendor/github.com/modern-go/reflect2/.flotilla-replaced
fi

if [ ! -s pkg/generated/openapi/zz_generated.openapi.go ]; then
  say "generating the OpenAPI definitions (make gen_openapi)"
  make gen_openapi >&2
fi

# The version as hack/lib/version.sh stamps it (in GOPATH mode the package lives under
# vendor/), so that `/version` answers v1.20.2 and not v0.0.0-master.
major="${UPSTREAM#v}"; major="${major%%.*}"
minor="${UPSTREAM#v*.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$UPSTREAM -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
rm -rf "$OUT/bin.tmp"
mkdir -p "$OUT/bin.tmp"
for b in "${BINS[@]}"; do
  say "go build $b ($UPSTREAM)"
  start=$SECONDS
  go build -o "$OUT/bin.tmp/$b" -ldflags "$ldflags" "./cmd/$b" >&2
  say "built $b in $((SECONDS - start)) s"
done
echo "$RECIPE" > "$OUT/bin.tmp/.recipe"
rm -rf "$OUT/bin"
mv "$OUT/bin.tmp" "$OUT/bin"
echo "$OUT/bin"
