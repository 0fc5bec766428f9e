#!/usr/bin/env bash
# Reproduces notebooks-data/torch-bridge/ (see README.md): the three policies at seed 1, the emulated-fp32
# control, and seeds 2-5 of native and ane-fp16 as the seed-noise reference; then the combined curves.csv.
# Run from the repository root after ./run build:   notebooks-data/torch-bridge/run-all.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=build/python
py=/usr/bin/python3
lm=python/examples/encoder_lm.py
out=notebooks-data/torch-bridge
TC="fp32,matmul=fp16/fp32/tc-h100,attn-scores=fp16/fp32/tc-h100,attn-values=fp16/fp32/tc-h100,loss-scale=256"
common=(--steps 300 --seed 1 --threads 1)
$py $lm --policy native   --label native   "${common[@]}" --out $out/native
$py $lm --policy ane-fp16 --label ane-fp16 "${common[@]}" --out $out/ane-fp16
$py $lm --policy "$TC"    --label tc-h100  "${common[@]}" --out $out/tc-h100
$py $lm --policy fp32     --label fp32-emulated "${common[@]}" --out $out/fp32-emulated
for s in 2 3 4 5; do
  $py $lm --policy native   --label native   --steps 300 --seed $s --threads 1 --out $out/seeds/native-s$s
  $py $lm --policy ane-fp16 --label ane-fp16 --steps 300 --seed $s --threads 1 --out $out/seeds/ane-fp16-s$s
done
$py $out/combine.py
