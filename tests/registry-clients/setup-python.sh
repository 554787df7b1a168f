#!/usr/bin/env bash
# Creates the Python venv the registry client tests use (tests/tests/registry.rs):
# confluent-kafka 2.16 with the Avro + Schema Registry extras, and fastavro, from PyPI.
# Idempotent: does nothing when the venv already has them. Prints the venv's python path.
#   CDC_TEST_CACHE   cache dir (default /var/cache/cdc-test); the venv is $CDC_TEST_CACHE/pyenv
set -euo pipefail
cache="${CDC_TEST_CACHE:-/var/cache/cdc-test}"
venv="$cache/pyenv"
stamp="$venv/.cdc-registry-clients-v1"
if [ -f "$stamp" ] && "$venv/bin/python" -c 'import confluent_kafka, fastavro' 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$cache"
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  'confluent-kafka[avro,schemaregistry]==2.16.*' 'fastavro' >&2
"$venv/bin/python" -c 'import confluent_kafka, fastavro; print("confluent-kafka", confluent_kafka.version()[0], "fastavro", fastavro.__version__)' >&2
touch "$stamp"
echo "$venv/bin/python"
