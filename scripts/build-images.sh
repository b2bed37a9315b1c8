#!/usr/bin/env bash
# Builds the container images of the docker-compose stack locally, without pulling anything:
#
#   ghcr.io/flotilla-io/flotilla:<version>   every binary, statically linked, FROM scratch
#   flotilla/etcd-local:3.4.23               Debian's etcd, FROM scratch (docker/etcd-local)
#
# 1. cargo builds the seven services and the CLI as static release binaries
#    (crt-static on x86_64-unknown-linux-gnu; getrandom uses the syscall, so no /dev needed);
# 2. they are stripped and staged into dist/rootfs/ (dist/ is the build context: target/ is
#    never sent to the daemon);
# 3. docker builds docker/flotilla/Dockerfile with the legacy builder (no BuildKit here);
# 4. docker/etcd-local/build.sh builds the etcd image.
#
# Idempotent: cargo and Docker's layer cache make a re-run cheap. Prints the image sizes.
#
#   scripts/build-images.sh                 # both images
#   scripts/build-images.sh --no-etcd       # only the Flotilla image
#   IMAGE=my/flotilla:dev scripts/build-images.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

BUILD_ETCD=1
for arg in "$@"; do
  case "$arg" in
    --no-etcd) BUILD_ETCD=0 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "build-images: unknown argument $arg" >&2; exit 2 ;;
  esac
done

VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
IMAGE="${IMAGE:-ghcr.io/flotilla-io/flotilla:$VERSION}"
TARGET=x86_64-unknown-linux-gnu
PACKAGES=(flotilla-api flotilla-cluster-health flotilla-taint-manager flotilla-scheduler
  flotilla-graceful-eviction flotilla-work-executor flotilla-member-sim flotilla-agent flotilla-cli)
BINARIES=(flotilla flotilla-api flotilla-cluster-health flotilla-taint-manager flotilla-scheduler
  flotilla-graceful-eviction flotilla-work-executor flotilla-member-sim flotilla-agent)

if ! docker info >/dev/null 2>&1; then
  echo "build-images: no Docker engine answers (docker info failed)" >&2
  exit 1
fi
if ! command -v protoc >/dev/null && [ -z "${PROTOC:-}" ]; then
  log "installing protobuf-compiler (the etcd-client build needs protoc)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi

# --- 1. static binaries --------------------------------------------------------------------
log "cargo build --release --target $TARGET (static)"
started=$(date +%s)
pkg_flags=()
for p in "${PACKAGES[@]}"; do pkg_flags+=(-p "$p"); done
# --target keeps build scripts and proc-macros dynamic; only the binaries are static.
RUSTFLAGS="-C target-feature=+crt-static --cfg getrandom_backend=\"linux_getrandom\" ${FLOTILLA_EXTRA_RUSTFLAGS:-}" \
  cargo build --release --target "$TARGET" "${pkg_flags[@]}"
echo "build-images: cargo took $(($(date +%s) - started)) s"

# --- 2. stage dist/rootfs ------------------------------------------------------------------
rootfs=dist/rootfs
rm -rf "$rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/tmp"
for bin in "${BINARIES[@]}"; do
  src="target/$TARGET/release/$bin"
  # a dynamic binary lists its libraries as "lib => path"; a static one has none
  if ldd "$src" 2>&1 | grep -q '=>'; then
    echo "build-images: $src is not statically linked:" >&2
    ldd "$src" >&2 || true
    exit 1
  fi
  strip -o "$rootfs/usr/local/bin/$bin" "$src"
done
chmod 1777 "$rootfs/tmp"
printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"

# --- 3. the Flotilla image (legacy builder; context dist/) ---------------------------------
log "docker build $IMAGE (context dist/)"
started=$(date +%s)
DOCKER_BUILDKIT=0 docker build -q -f docker/flotilla/Dockerfile -t "$IMAGE" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.source=https://github.com/flotilla-io/flotilla" \
  dist >/dev/null
echo "build-images: docker build took $(($(date +%s) - started)) s"
# Smoke test: the binaries start in the scratch image, as the non-root user.
docker run --rm "$IMAGE" --version
for bin in "${BINARIES[@]}"; do
  docker run --rm --entrypoint "/usr/local/bin/$bin" "$IMAGE" --help >/dev/null \
    || { echo "build-images: $bin does not start in $IMAGE" >&2; exit 1; }
done
user="$(docker image inspect -f '{{.Config.User}}' "$IMAGE")"
[ "$user" = "65532:65532" ] || { echo "build-images: $IMAGE runs as '$user'" >&2; exit 1; }

# --- 4. the etcd image -------------------------------------------------------------------
if [ "$BUILD_ETCD" = 1 ]; then
  log "docker/etcd-local/build.sh"
  docker/etcd-local/build.sh
fi

# --- sizes -----------------------------------------------------------------------------------
log "images"
images=("$IMAGE")
[ "$BUILD_ETCD" = 1 ] && images+=(flotilla/etcd-local:3.4.23)
for image in "${images[@]}"; do
  size=$(docker image inspect -f '{{.Size}}' "$image")
  printf '  %-45s %6s MB (%s bytes)\n' "$image" "$(awk -v s="$size" 'BEGIN{printf "%.1f", s/1e6}')" "$size"
done
for bin in "${BINARIES[@]}"; do
  printf '  %-45s %6s MB\n' "/usr/local/bin/$bin" \
    "$(awk -v s="$(stat -c %s "$rootfs/usr/local/bin/$bin")" 'BEGIN{printf "%.1f", s/1e6}')"
done
