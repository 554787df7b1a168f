#!/usr/bin/env bash
# Paired MariaDB stream timing: per round the bench's 1M-change workload is written again
# (bench/workload_mysql.sh) after each binary given has stored its start position
# (`tests/bench/cut_mysql.sh prime`, one log directory per binary), then
# `mariadb-binlog --verbose` (the limit, bench/limit_mysql.sh) and each binary drain it
# through the bench's `measure` (bench/cut.sh mysql with `tests/bench/cut_mysql.sh stream`),
# the binaries' order rotating from round to round. Needs the bench's MariaDB up
# (bench/mysql_up.sh, with the same BENCH_WORK and MYPORT).
#
#   tests/bench/mysql_ab.sh ROUNDS BIN [BIN...]
#
# Prints the `measure` line of each run (label, wall s, events, events/s, source MB/s,
# output MB/s, user s, sys s, mariadbd CPU s, peak RSS MB, steady s, rc); runs are labelled
# by the binary's parent directories. BENCH_DIR: the shared bench (default ../shared/bench
# of the main checkout); BENCH_WORK as for the bench (default /tmp/cdc-bench).
set -euo pipefail
rounds=$1; shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
BENCH_DIR=${BENCH_DIR:-$(cd "$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir)/../.." && pwd)/shared/bench}
export BENCH_WORK=${BENCH_WORK:-/tmp/cdc-bench} RESULTS=${BENCH_WORK:-/tmp/cdc-bench}/results-mysql-ab
rm -rf "$RESULTS"; mkdir -p "$RESULTS"
cd "$BENCH_DIR"
key() { echo "$1" | tr -c 'a-zA-Z0-9\n' '_' | tail -c 40; }
bins=("$@")
for r in $(seq "$rounds"); do
  hooks=""
  for b in "${bins[@]}"; do
    hooks="$hooks CDC_BIN=$b CUT_DIR=$BENCH_WORK/ab-$(key "$b") $repo/tests/bench/cut_mysql.sh prime;"
  done
  for b in "${bins[@]}"; do rm -rf "$BENCH_WORK/ab-$(key "$b")"; done
  PRE_WORKLOAD_HOOKS="$hooks" bench/workload_mysql.sh >/dev/null 2>&1
  bench/limit_mysql.sh >/dev/null 2>&1
  n=${#bins[@]}
  for i in $(seq 0 $((n - 1))); do
    b=${bins[$(( (i + r) % n ))]}
    CUT_LABEL="r${r}_$(key "$b")" \
      CUT_MYSQL_CMD="CDC_BIN=$b CUT_DIR=$BENCH_WORK/ab-$(key "$b") $repo/tests/bench/cut_mysql.sh stream" \
      bench/cut.sh mysql >/dev/null 2>&1 || echo "round $r $b failed (see $RESULTS)"
  done
done
column -t -s $'\t' "$RESULTS/results.tsv"
