#!/usr/bin/env bash
# Generates a development CA and one certificate per Flotilla service (server and client
# use, SANs: the service name, localhost, 127.0.0.1), plus a `cli` client certificate, for
# mutual TLS between the services (--tls-cert, --tls-key, --tls-client-ca, --tls-ca).
#
# A client certificate's CN names the principal it authenticates (docs/design.md §9):
#   services        CN=system:flotilla:service:<name>   (api.pem, scheduler.pem, ...)
#   cli             CN=system:flotilla:admin            (cli.pem)
#   member1..3      CN=system:flotilla:service:<name>   (member-sim's server certificates)
# More principals as extra arguments, one certificate each (`:` becomes `-` in the name):
#   scripts/dev-certs.sh certs agent:edge1 viewer   → certs/agent-edge1.pem, certs/viewer.pem
#
#   scripts/dev-certs.sh [DIR [PRINCIPAL...]]   (default DIR: ./certs; existing files are kept)
#
# For development and tests only: keys are unencrypted, the CA lives beside them.
set -euo pipefail

dir=${1:-certs}
shift || true
extra=("$@")
days=${FLOTILLA_CERT_DAYS:-825}
services=(api cluster-health taint-manager scheduler graceful-eviction work-executor
          member1 member2 member3 cli)

command -v openssl >/dev/null || { echo "dev-certs: openssl is required (apt-get install -y openssl)" >&2; exit 1; }
mkdir -p "$dir"
umask 077

if [[ ! -f $dir/ca.pem ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" -days "$days" \
    -subj "/CN=Flotilla development CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  echo "dev-certs: CA $dir/ca.pem"
fi

# issue NAME CN SAN: a certificate NAME.pem (+ NAME-key.pem) for CN, signed by the CA
issue() {
  local name=$1 cn=$2 san=$3 ext
  [[ -f $dir/$name.pem ]] && return 0
  ext=$(mktemp)
  printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=$san" > "$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/$name-key.pem" -out "$dir/$name.csr" -subj "/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
    -CAcreateserial -out "$dir/$name.pem" -days "$days" -extfile "$ext" 2>/dev/null
  rm -f "$dir/$name.csr" "$ext"
  echo "dev-certs: $name ($cn) → $dir/$name.pem, $dir/$name-key.pem"
}

for svc in "${services[@]}"; do
  if [[ $svc == cli ]]; then cn=system:flotilla:admin; else cn=system:flotilla:service:$svc; fi
  issue "$svc" "$cn" "DNS:$svc,DNS:localhost,IP:127.0.0.1"
done
for principal in "${extra[@]}"; do
  case $principal in
    admin | viewer | service:?* | agent:?*) ;;
    *) echo "dev-certs: $principal is not a principal (admin, viewer, service:<name>, agent:<cluster>)" >&2; exit 2 ;;
  esac
  issue "${principal//:/-}" "system:flotilla:$principal" "DNS:localhost,IP:127.0.0.1"
done
chmod 644 "$dir"/*.pem
chmod 600 "$dir"/*-key.pem
