#!/usr/bin/env bash
# The docker-compose end-to-end test (tests/tests/compose.rs): builds the images offline
# (scripts/build-images.sh), then brings the stack up under a unique project name, drives
# failovers and faults through it, and tears it down (`down -v`, also when the test fails).
#
#   scripts/compose-test.sh              # needs a Docker engine and docker-compose (v1 is fine)
#   SKIP_IMAGE_BUILD=1 scripts/compose-test.sh   # reuse the images already built
#
# scripts/test.sh runs it when `docker info` answers. Without a Docker engine this script
# fails (exit 2): the compose test cannot pass where it cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

if ! docker info >/dev/null 2>&1; then
  printf '\033[1;31mcompose-test: no Docker engine answers (docker info failed): the compose test did NOT run\033[0m\n' >&2
  exit 2
fi
if ! command -v docker-compose >/dev/null; then
  log "installing docker-compose (Debian package)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker-compose >/dev/null
fi
# compose v1 shells out to `docker build`; without buildx, BuildKit must stay off.
export DOCKER_BUILDKIT=0

if [ -z "${SKIP_IMAGE_BUILD:-}" ]; then
  log "building the images (scripts/build-images.sh)"
  started=$(date +%s)
  scripts/build-images.sh
  echo "compose-test: images built in $(($(date +%s) - started)) s"
fi

log "building the host's flotilla CLI (the test drives the stack with it)"
cargo build -p flotilla-cli

log "the compose end-to-end test"
started=$(date +%s)
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run -p flotilla-tests --test scenarios --run-ignored ignored-only --no-capture compose::
else
  cargo test -p flotilla-tests --test scenarios compose:: -- --ignored --nocapture
fi
echo "compose-test: the test took $(($(date +%s) - started)) s (with its build)"
