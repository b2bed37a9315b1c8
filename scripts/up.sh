#!/usr/bin/env bash
# Runs Flotilla from a fresh machine: installs Debian's protobuf-compiler when `protoc` is
# missing (the etcd-client crate's build needs it), then builds and runs `flotilla up` —
# every service in one process on the embedded store, with three simulated member clusters.
# Arguments go to `flotilla up` (e.g. `scripts/up.sh --demo`, `scripts/up.sh --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v protoc >/dev/null && [ -z "${PROTOC:-}" ]; then
  echo "==> installing protobuf-compiler (the etcd-client build needs protoc)" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
exec cargo run --release -p flotilla-cli -- up "$@"
