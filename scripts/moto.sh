#!/usr/bin/env bash
# Prints the bin directory of moto's server (`moto_server`, and a python with boto3), installing
# `moto[server]` from PyPI into a venv under target/ first if needed (no root). For the SES test
# against moto (tests/it/ses_moto.rs: identities, MessageRejected, SigV4 checked by moto's IAM);
# scripts/test.sh exports it as MOTO_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MOTO_VENV:-$PWD/target/moto-venv}
if [ ! -x "$venv/bin/moto_server" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'moto[server]>=5.2,<6' >&2
fi
echo "$venv/bin"
