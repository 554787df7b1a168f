#!/usr/bin/env bash
# Installs the database servers the test suite and the sandbox start (Debian packages
# only). Idempotent: installs only what is missing. Needs root (or sudo) when it installs.
# Nothing is started: every test and the sandbox start their own private instances.
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v pg_recvlogical >/dev/null 2>&1 || missing+=(postgresql-client)
command -v mariadbd >/dev/null 2>&1 || missing+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-client)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# Building librdkafka and OpenSSL from the rdkafka crate's sources (Kafka as the log).
command -v make >/dev/null 2>&1 || missing+=(make)
command -v perl >/dev/null 2>&1 || missing+=(perl)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
# A TLS-terminating proxy in front of the test broker (Kafka over TLS).
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# For the schema-registry client tests (Confluent's Python and Java clients).
command -v unzip >/dev/null 2>&1 || missing+=(unzip)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
# The admin status page is tested in a real browser; the alert rules with promtool.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Postgres and MariaDB refuse to run as root; as root the harness runs them as these
# users, which the packages create.
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || { echo "error: the postgres OS user is missing (the postgresql package creates it)" >&2; exit 1; }
  id mysql >/dev/null 2>&1 || { echo "error: the mysql OS user is missing (the mariadb-server package creates it)" >&2; exit 1; }
fi
