#!/usr/bin/env bash
# Builds the offline etcd image flotilla/etcd-local:3.4.23 FROM scratch out of Debian's
# etcd-server/etcd-client packages (the binaries are dynamically linked against glibc only,
# so libc.so.6 and the loader go in too), then checks that it serves requests.
#
# Idempotent: re-running re-stages the same files and Docker's cache reuses the layers.
# Usage: docker/etcd-local/build.sh [--no-verify]
set -euo pipefail

IMAGE="${IMAGE:-flotilla/etcd-local:3.4.23}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERIFY=1
[[ "${1:-}" == "--no-verify" ]] && VERIFY=0

if [[ ! -x /usr/bin/etcd || ! -x /usr/bin/etcdctl ]]; then
    echo "etcd-local: /usr/bin/etcd or etcdctl missing; installing etcd-server etcd-client" >&2
    SUDO=""
    [[ "$(id -u)" != 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server etcd-client >/dev/null
fi

version="$(/usr/bin/etcd --version | sed -n 's/^etcd Version: //p')"
if [[ "$version" != "3.4.23" ]]; then
    echo "etcd-local: warning: /usr/bin/etcd is $version, the image is tagged 3.4.23" >&2
fi

if ! docker info >/dev/null 2>&1; then
    echo "etcd-local: no Docker engine answers (docker info failed)" >&2
    exit 1
fi

# --- stage the root filesystem ---------------------------------------------------------
rm -rf "$HERE/rootfs" "$HERE/data"
mkdir -p "$HERE/rootfs/usr/bin" "$HERE/rootfs/tmp" "$HERE/rootfs/etc" "$HERE/data"
cp /usr/bin/etcd /usr/bin/etcdctl "$HERE/rootfs/usr/bin/"
# Every shared object the two binaries load (today: libc.so.6 and ld-linux-x86-64.so.2).
libs="$( (ldd /usr/bin/etcd; ldd /usr/bin/etcdctl) | grep -o '/[^ ]*' | sort -u)"
for lib in $libs; do
    mkdir -p "$HERE/rootfs$(dirname "$lib")"
    cp -L "$lib" "$HERE/rootfs$lib"
done
for required in /lib/x86_64-linux-gnu/libc.so.6 /lib64/ld-linux-x86-64.so.2; do
    [[ -f "$HERE/rootfs$required" ]] || { echo "etcd-local: $required was not staged" >&2; exit 1; }
done
chmod 1777 "$HERE/rootfs/tmp"
chmod 0700 "$HERE/data"
printf 'root:x:0:0:root:/:/sbin/nologin\netcd:x:1000:1000:etcd:/var/lib/etcd:/sbin/nologin\n' \
    >"$HERE/rootfs/etc/passwd"
printf 'root:x:0:\netcd:x:1000:\n' >"$HERE/rootfs/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$HERE/rootfs/etc/hosts"

# --- build (legacy builder: no BuildKit) ------------------------------------------------
DOCKER_BUILDKIT=0 docker build -q -t "$IMAGE" "$HERE" >/dev/null
echo "etcd-local: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"

# --- verify: it starts, answers, and runs as the non-root user ---------------------------
if [[ "$VERIFY" == 1 ]]; then
    id="$(docker run -d --rm -p 127.0.0.1::2379 "$IMAGE")"
    trap 'docker rm -f "$id" >/dev/null 2>&1 || true' EXIT
    for _ in $(seq 1 100); do
        if docker exec "$id" /usr/bin/etcdctl --endpoints=http://127.0.0.1:2379 endpoint health >/dev/null 2>&1; then
            break
        fi
        sleep 0.1
    done
    docker exec "$id" /usr/bin/etcdctl --endpoints=http://127.0.0.1:2379 put /etcd-local/check ok >/dev/null
    got="$(docker exec "$id" /usr/bin/etcdctl --endpoints=http://127.0.0.1:2379 get --print-value-only /etcd-local/check)"
    [[ "$got" == "ok" ]] || { echo "etcd-local: verification failed (got '$got')" >&2; exit 1; }
    user="$(docker inspect -f '{{.Config.User}}' "$id")"
    echo "etcd-local: verified: put/get work, runs as $user, host port $(docker port "$id" 2379/tcp | head -1)"
fi
