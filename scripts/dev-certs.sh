#!/usr/bin/env bash
# Generates a development CA and one certificate per Flotilla service (server and client
# use, SANs: the service name, localhost, 127.0.0.1), plus a `cli` client certificate, for
# mutual TLS between the services (--tls-cert, --tls-key, --tls-client-ca, --tls-ca).
#
#   scripts/dev-certs.sh [DIR]        (default: ./certs; existing files are kept)
#
# For development and tests only: keys are unencrypted, the CA lives beside them.
set -euo pipefail

dir=${1:-certs}
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

for svc in "${services[@]}"; do
  [[ -f $dir/$svc.pem ]] && continue
  ext=$(mktemp)
  printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=DNS:$svc,DNS:localhost,IP:127.0.0.1" > "$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/$svc-key.pem" -out "$dir/$svc.csr" -subj "/CN=$svc" 2>/dev/null
  openssl x509 -req -in "$dir/$svc.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
    -CAcreateserial -out "$dir/$svc.pem" -days "$days" -extfile "$ext" 2>/dev/null
  rm -f "$dir/$svc.csr" "$ext"
  echo "dev-certs: $svc → $dir/$svc.pem, $dir/$svc-key.pem"
done
chmod 644 "$dir"/*.pem
chmod 600 "$dir"/*-key.pem
