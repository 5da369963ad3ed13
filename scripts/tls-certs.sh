#!/usr/bin/env bash
# Throwaway TLS material for tests, with the machine's openssl, in DIR:
#   ca.crt/ca.key           a CA (2 days)
#   other-ca.crt/.key       an unrelated CA (for "untrusted" cases)
#   server.crt/server.key   signed by ca.crt, for DNS name `localhost` only (no IP address, so
#                           a client that checks names must refuse it through 127.0.0.1)
# Used by `PG_TLS=1 scripts/pg.sh` and tests/it/tls.rs. Never for anything but loopback tests.
set -euo pipefail
t=${1:?usage: tls-certs.sh DIR}
mkdir -p "$t"
{
  for ca in ca other-ca; do
    openssl req -x509 -new -newkey rsa:2048 -nodes -days 2 -subj "/CN=campaign-sender test $ca" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
      -keyout "$t/$ca.key" -out "$t/$ca.crt"
  done
  openssl req -new -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$t/server.key" -out "$t/server.csr"
  printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$t/ext"
  openssl x509 -req -in "$t/server.csr" -CA "$t/ca.crt" -CAkey "$t/ca.key" -CAcreateserial \
    -days 2 -extfile "$t/ext" -out "$t/server.crt"
} >"$t/openssl.log" 2>&1 || { cat "$t/openssl.log" >&2; exit 1; }
chmod 600 "$t"/*.key
chmod 755 "$t"
chmod 644 "$t"/*.crt
