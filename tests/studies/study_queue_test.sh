#!/usr/bin/env bash
# Test of scripts/study-queue (the study's run driver) in a throw-away git repository, on tiny runs of the
# committed excerpt:  study_queue_test.sh ROUNDOFF_EXE SOURCE_DIR
# Checks: each finished run is committed with its files and a table row; a machine that lost its runs directory
# still collects every committed run; a re-run starts nothing; a table with fewer rows than the committed one is
# refused and not committed, and the run is published once the cause is gone; a bad BIN is a clear error.
set -euo pipefail
exe=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export GIT_AUTHOR_NAME=test GIT_AUTHOR_EMAIL=test@example.invalid GIT_COMMITTER_NAME=test
export GIT_COMMITTER_EMAIL=test@example.invalid

repo=$work/repo runs=$work/runs
mkdir -p "$repo/scripts" "$repo/notebooks-data"
cp "$src/scripts/study-queue" "$repo/scripts/"
cat > "$repo/grid.json" <<EOF
{ "study": "queue-test",
  "fixed": { "config": "custom", "d": 16, "layers": 1, "heads": 2, "seq": 8, "batch": 2, "eval-tokens": 256,
             "progress-every": 0, "steps": 4, "corpus": "$src/studies/data/excerpt" },
  "axes": { "precision": ["fp32", "ane-fp16"], "seed": [1, 2] }, "shard": 2 }
EOF
cd "$repo"
git init -q . && git add -A && git commit -qm init
mapfile -t names < <("$exe" sweep grid.json --runs-dir "$work/none" --dry-run | awk '$1 == "new" {print $2}')
((${#names[@]} == 4)) || fail "expected 4 runs in the dry run, got ${#names[@]}"
for n in "${names[@]}"; do echo "grid.json $n"; done > "$work/all.txt"
{ echo "# two runs"; echo; head -2 "$work/all.txt"; } > "$work/q2.txt"
queue() { BIN=$exe THREADS=1 RUNS=$runs ROUNDOFF_DATA=$work/data scripts/study-queue "$@" > "$work/log" 2>&1; }
rows() { echo $(($(wc -l < notebooks-data/queue-test/runs.csv) - 1)); }
commits() { git rev-list --count HEAD; }

queue "$work/q2.txt" || fail "first queue: $(cat "$work/log")"
(($(commits) == 3)) || fail "expected 2 run commits, got $(($(commits) - 1))"
(($(rows) == 2)) || fail "expected 2 table rows, got $(rows)"
for n in "${names[@]:0:2}"; do
  for f in summary.json curves.csv; do
    git cat-file -e "HEAD:notebooks-data/queue-test/runs/$n/$f" || fail "$n/$f not committed"
  done
done
[[ -z $(git status --porcelain) ]] || fail "uncommitted changes after the queue: $(git status --porcelain)"

rm -rf "$runs"  # the machine lost its disk
head -3 "$work/all.txt" > "$work/q3.txt"
queue "$work/q3.txt" || fail "third run: $(cat "$work/log")"
(($(rows) == 3)) || fail "after losing the runs directory the table has $(rows) rows, expected 3"

queue "$work/missing.txt" && fail "a missing queue was accepted"
grep -q "not found" "$work/log" || fail "no clear error for a missing queue: $(cat "$work/log")"
BIN=/nonexistent scripts/study-queue "$work/q3.txt" > "$work/log" 2>&1 && fail "a missing BIN was accepted"
grep -q "BIN '/nonexistent' is not an executable" "$work/log" || fail "no clear error for a bad BIN: $(cat "$work/log")"

before=$(commits)
queue "$work/q3.txt" || fail "re-run: $(cat "$work/log")"
grep -q " start " "$work/log" && fail "a re-run started a committed run"
(($(commits) == before)) || fail "a re-run committed something"

printf 'x,y\nx,z\n' >> notebooks-data/queue-test/runs.csv && git commit -qam "two rows no run has"
before=$(commits)
queue "$work/all.txt" || fail "fourth run: $(cat "$work/log")"
grep -q "not committing" "$work/log" || fail "a table with fewer rows was not refused: $(cat "$work/log")"
(($(commits) == before)) || fail "a refused table was committed"
git checkout -q HEAD~1 -- notebooks-data/queue-test/runs.csv && git commit -qm "drop the two rows"
rmdir "$runs/claims/${names[3]}"
queue "$work/all.txt" || fail "fourth run again: $(cat "$work/log")"
(($(rows) == 4)) || fail "after the refusal was cleared the table has $(rows) rows, expected 4"
git cat-file -e "HEAD:notebooks-data/queue-test/runs/${names[3]}/summary.json" || fail "the fourth run was not committed"
echo "study-queue: all checks passed"
