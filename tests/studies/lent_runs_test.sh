#!/usr/bin/env bash
# Test of scripts/lent-runs (study runs on a lent machine, collected by later calls, unpacked here) on tiny runs of
# the committed excerpt:  lent_runs_test.sh ROUNDOFF_EXE SOURCE_DIR
# Checks: the first call returns while its runs train in the background and collects nothing unfinished; a call
# naming runs while others train is refused; a later call collects every run any call started (the loss of a run
# that finished between calls, which this script exists to prevent); only complete runs are collected, without
# checkpoint or lock; a later call starts new runs once the earlier ones are done; unpack puts runs where the
# sweep finds them complete, moves an unfinished local copy aside and releases the claim; bad input is a clear error.
set -euo pipefail
exe=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$work"
cat > grid.json <<EOF
{ "study": "lent-test",
  "fixed": { "config": "custom", "d": 16, "layers": 1, "heads": 2, "seq": 8, "batch": 2, "eval-tokens": 256,
             "progress-every": 0, "steps": 4, "corpus": "$src/studies/data/excerpt" },
  "axes": { "precision": ["fp32", "ane-fp16"], "seed": [1, 2] }, "shard": 2 }
EOF
mapfile -t n < <("$exe" sweep grid.json --runs-dir "$work/none" --dry-run | awk '$1 == "new" {print $2}')
((${#n[@]} == 4)) || fail "expected 4 runs in the dry run, got ${#n[@]}"
# A binary that waits before each run, so that the first call surely returns while its runs train.
printf '#!/bin/sh\nsleep 3\nexec %q "$@"\n' "$exe" > slow-bin && chmod +x slow-bin
lent() {  # OUT-DIR ARGS...: one call on the "lent machine"; its output in $work/log
  local out=$1; shift
  OUT=$work/$out BIN=$work/slow-bin RUNS=$work/lent STATE=$work/state THREADS=1 ROUNDOFF_DATA=$work/data \
    "$src/scripts/lent-runs" run "$@" > "$work/log" 2>&1
}
tars() { (cd "$work/$1" && ls -- *.tar 2>/dev/null | sort | tr '\n' ' '); }

lent o1 0 "grid.json:${n[0]}" "grid.json:${n[1]}" || fail "first call: $(cat log)"
[[ -z $(tars o1) ]] || fail "the first call collected runs that had not finished: $(tars o1)"
grep -q "^${n[0]}: \(waiting\|in training\)" log || fail "no status line for ${n[0]}: $(cat log)"
[[ -s o1/host.txt ]] || fail "no host.txt"
lent o1b 0 "grid.json:${n[2]}" && fail "a call naming runs while others train was accepted"
grep -q "still training" log || fail "no clear refusal: $(cat log)"

lent o2 120 || fail "second call: $(cat log)"
[[ $(tars o2) == "$(printf '%s\n' "${n[0]}.tar" "${n[1]}.tar" | sort | tr '\n' ' ')" ]] ||
  fail "the second call (no runs named) did not collect both runs: $(tars o2); $(cat log)"
for r in "${n[0]}" "${n[1]}"; do
  list=$(tar -tf "o2/$r.tar")
  for f in "lent-test/$r/summary.json" "lent-test/$r/curves.csv" "lent-test/logs/$r.log"; do
    grep -qx "$f" <<< "$list" || fail "$r.tar lacks $f"
  done
  grep -q "checkpoint.bin\|roundoff.lock" <<< "$list" && fail "$r.tar holds a checkpoint or lock"
  grep -q "^$r: complete (lent-test)" log || fail "no complete line for $r: $(cat log)"
done

lent o3 120 "grid.json:${n[2]}" || fail "third call: $(cat log)"
(($(wc -w <<< "$(tars o3)") == 3)) || fail "after a later batch expected 3 runs, got $(tars o3)"

sed -i 's/"complete": *true/"complete": false/' "lent/lent-test/${n[1]}/summary.json"
lent o4 0 || fail "fourth call: $(cat log)"
[[ -f o4/${n[1]}.tar ]] && fail "an incomplete run was collected"
grep -q "^${n[1]}: in training" log || fail "an incomplete run was not reported as such: $(cat log)"
[[ -f o4/${n[0]}.tar ]] || fail "the fourth call lost a complete run"

# Here: a claim and an unfinished local copy of run 0, nothing of runs 1 and 2.
mkdir -p local/claims/"${n[0]}" local/lent-test/"${n[0]}"
echo '{"complete": false}' > local/lent-test/"${n[0]}"/summary.json
RUNS=$work/local "$src/scripts/lent-runs" unpack o3 > log 2>&1 || fail "unpack: $(cat log)"
[[ -d local/claims/${n[0]} ]] && fail "unpack did not release the claim"
compgen -G "local/partial/${n[0]}.*" > /dev/null || fail "the unfinished local copy was not moved aside"
for r in "${n[0]}" "${n[1]}" "${n[2]}"; do
  "$exe" sweep grid.json --run "$r" --runs-dir "$work/local" > sweep.log 2>&1 || fail "sweep on $r: $(cat sweep.log)"
  grep -q "$r complete" sweep.log || fail "the sweep does not see unpacked $r as complete: $(cat sweep.log)"
  [[ -f local/lent-test/logs/$r.log ]] || fail "$r's log was not unpacked"
done
RUNS=$work/local "$src/scripts/lent-runs" unpack o3 > log 2>&1 || fail "second unpack: $(cat log)"
(($(grep -c "already complete here" log) == 3)) || fail "a second unpack touched complete runs: $(cat log)"

lent o5 x && fail "a LIMIT that is not a number was accepted"
grep -q "LIMIT 'x' is not a number" log || fail "no clear error for LIMIT: $(cat log)"
lent o5 0 "${n[3]}" && fail "a run without its grid was accepted"
grep -q "is not GRID:RUN" log || fail "no clear error for GRID:RUN: $(cat log)"
RUNS=$work/local "$src/scripts/lent-runs" unpack "$work/missing" > log 2>&1 && fail "a missing directory was accepted"
grep -q "is not a directory" log || fail "no clear error for unpack: $(cat log)"
echo "lent-runs: all checks passed"
