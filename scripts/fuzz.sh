#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders (fuzz/: cargo-fuzz layout, libFuzzer), on the
# stable toolchain: builds every target, then runs each in turn for a fixed number of
# executions, starting from its committed corpus (fuzz/corpus/<target>/).
#
#   scripts/fuzz.sh                  short form (CI): about 1,000,000 executions in all
#   scripts/fuzz.sh --long           10,000,000 executions per target
#   scripts/fuzz.sh pgoutput binlog  only these targets (pgoutput binlog segment config)
#   EXECS=N scripts/fuzz.sh          N executions per target
#   scripts/fuzz.sh --build-only     only build the targets (CI builds them early, in the
#                                    background at the lowest priority, while the tests run)
#   scripts/fuzz.sh --minimize       no fuzzing: merges fuzz/seeds/<t> (python3 fuzz/seeds.py)
#                                    and what earlier runs found (fuzz/target/found/<t>) into
#                                    fuzz/corpus/<t>, minimised (libFuzzer -set_cover_merge=1
#                                    over edges); regression-* inputs (ones that crashed
#                                    before a fix) are always kept
#
# Seeds: the short form runs with a fixed libFuzzer seed (FUZZ_SEED, default 1), so the
# same commit explores the same inputs and a failing CI run is reproduced exactly by
# running this script again; --long (and FUZZ_SEED=0) draws a random seed per run, which
# is where new ground is covered. Every run starts from the committed corpus.
#
# Per input: -timeout (FUZZ_TIMEOUT, default 1 s) and -rss_limit_mb (FUZZ_RSS_MB, default
# 2048). New inputs go to fuzz/target/found/<t>/, never into the committed corpus. A crash,
# hang or out-of-memory input is written to fuzz/artifacts/<t>/ and its path printed; the
# script then goes on with the next target and exits 1 at the end. When CDC_FAULT_REPORT
# names a file, one JSON line per target is appended to it:
#   {"fuzz": "<target>", "executions": N, "crashes": 0, "seconds": S, "corpus_files": K}
# (executions as libFuzzer counts them; corpus_files: the corpus the run ended with).
#
# Builds need no nightly: cargo-fuzz with `-s none` (no sanitizer) passes only stable
# flags (SanitizerCoverage via -Cpasses=sancov-module and -Cllvm-args, --cfg fuzzing,
# debug assertions and overflow checks on). cargo-fuzz is installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ALL=(pgoutput binlog segment config)
# Short form: executions per target, about 1,000,000 in all (segment and config run
# slower per input: files per input, a whole configuration parse).
declare -A SHORT=([pgoutput]=350000 [binlog]=300000 [segment]=150000 [config]=200000)
LONG=10000000
mode=short
minimize=0
build_only=0
targets=()
for a in "$@"; do
  case "$a" in
    --long) mode=long ;;
    --minimize) minimize=1 ;;
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    -*) echo "unknown option $a" >&2; exit 2 ;;
    *) targets+=("$a") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
  [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "no fuzz target $t (have: ${ALL[*]})" >&2; exit 2; }
done

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
BIN=$ROOT/fuzz/target/$TRIPLE/release
start=$(date +%s)
echo "== building fuzz targets (cargo fuzz build -s none, stable $(rustc --version | cut -d' ' -f2))"
(cd fuzz && cargo fuzz build -s none "${FUZZ_BUILD_ARGS[@]+"${FUZZ_BUILD_ARGS[@]}"}")
echo "   built in $(( $(date +%s) - start )) s"
[ "$build_only" = 1 ] && exit 0

max_len() {
  case "$1" in
    segment) echo 65536 ;;  # whole log directories; the ledger alone is 12 KiB
    config) echo 16384 ;;
    *) echo 16384 ;;
  esac
}

if [ "$minimize" = 1 ]; then
  for t in "${targets[@]}"; do
    new=$(mktemp -d)
    srcs=()
    for d in "fuzz/corpus/$t" "fuzz/seeds/$t" "fuzz/target/found/$t"; do
      [ -d "$d" ] && srcs+=("$d")
    done
    "$BIN/$t" -set_cover_merge=1 -use_counters=0 -timeout="${FUZZ_TIMEOUT:-1}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
      -max_len="$(max_len "$t")" "$new" "${srcs[@]}" >"fuzz/target/merge-$t.log" 2>&1 \
      || { tail -20 "fuzz/target/merge-$t.log"; exit 1; }
    # Inputs that once crashed stay, whether or not they still add coverage.
    cp fuzz/corpus/"$t"/regression-* "$new"/ 2>/dev/null || true
    rm -rf "fuzz/corpus/$t"
    mkdir -p fuzz/corpus
    mv "$new" "fuzz/corpus/$t"
    echo "$t: $(ls "fuzz/corpus/$t" | wc -l) files, $(du -sh "fuzz/corpus/$t" | cut -f1)"
  done
  exit 0
fi

if [ "$mode" = short ]; then seed=${FUZZ_SEED:-1}; else seed=${FUZZ_SEED:-0}; fi
failed=0
total=0
for t in "${targets[@]}"; do
  if [ -n "${EXECS:-}" ]; then runs=$EXECS
  elif [ "$mode" = long ]; then runs=$LONG
  else runs=${SHORT[$t]}
  fi
  found=fuzz/target/found/$t
  artifacts=fuzz/artifacts/$t
  log=fuzz/target/fuzz-$t.log
  mkdir -p "$found" "$artifacts" "fuzz/corpus/$t"
  before=$(ls "$artifacts" | wc -l)
  t0=$(date +%s.%N)
  set +e
  # found/ first: libFuzzer adds new inputs to its first corpus directory.
  "$BIN/$t" -runs="$runs" -seed="$seed" -timeout="${FUZZ_TIMEOUT:-1}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$found" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  execs=${execs:-0}
  total=$((total + execs))
  crashes=$(( $(ls "$artifacts" | wc -l) - before ))
  if [ "$rc" != 0 ] && [ "$crashes" = 0 ]; then crashes=1; fi
  corpus=$(cat <(ls "fuzz/corpus/$t") <(ls "$found") | sort -u | wc -l)
  used_seed=$(sed -n 's/^INFO: Seed: //p' "$log" | head -1)
  printf '%-9s %10s executions in %6s s, %d crashes, corpus %d files (seed %s)\n' "$t" "$execs" "$secs" "$crashes" "$corpus" "$used_seed"
  if [ "$crashes" != 0 ]; then
    failed=1
    grep -E "^(==[0-9]+== ERROR|SUMMARY|thread '.*' panicked|ERROR:)" "$log" | head -5 | sed 's/^/    /'
    for f in $(ls -t "$artifacts" | head -n "$crashes"); do
      echo "    crashing input: $ROOT/$artifacts/$f"
      # The input itself, so that a crash on another machine (CI) is reproduced exactly:
      # the same seed does not replay the same inputs where the corpus is listed in
      # another order.
      if [ "$(stat -c %s "$artifacts/$f")" -le 16384 ]; then
        echo "    its bytes (base64; echo ... | base64 -d > crash): $(base64 -w0 "$artifacts/$f")"
      fi
    done
    [ "$(ls "$artifacts" | wc -l)" -gt "$before" ] || echo "    (libFuzzer exited $rc without an artifact; see $ROOT/$log)"
    echo "    reproduce: $BIN/$t <input>   (log: $ROOT/$log; the run: FUZZ_SEED=$used_seed EXECS=$runs scripts/fuzz.sh $t)"
  fi
  if [ -n "${CDC_FAULT_REPORT:-}" ]; then
    printf '{"fuzz": "%s", "executions": %d, "crashes": %d, "seconds": %.1f, "corpus_files": %d}\n' \
      "$t" "$execs" "$crashes" "$secs" "$corpus" >>"$CDC_FAULT_REPORT"
  fi
done
echo "== $total executions in $(( $(date +%s) - start )) s (build included), mode $mode"
exit $failed
