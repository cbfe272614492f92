#!/usr/bin/env bash
# The mixer bake-off on the device (1 to 8 GPUs): (a) a quick --measure (seconds per step of every mixer at
# every shape of the grid, all workers busy, and an estimate of the whole grid; then the MQAR learnability
# runs, which the sweep reuses), (b) the grid: the learning-rate sweep first (--lrs x --lr-seeds, default
# 3 rates x 2 seeds; a cell's seeds start as soon as its sweep is stored), then --seeds (default 5) per cell
# at the chosen rate, within a wall-clock limit. Every run is stored in $OUT/bakeoff.json the moment it
# finishes, with its cost (wall seconds, device), its held-out evaluations and the learning-rate choices so
# far, so a call cut short keeps every finished run and the next call goes on from there.
# The store starts as a merge of figures/bakeoff.json (it travels with the working tree) and of every store
# named in $RESUME (e.g. the $OUT/bakeoff.json a previous call brought back, copied under runs/ and carried),
# so stored runs are not redone. At the end it is merged into figures/bakeoff.json (added to it: no stored run
# is dropped) and plotted into $OUT/figures/; the table (success rates, Wilson intervals) ends the log.
#
# Usage (repository root): bash scripts/gpu_bakeoff.sh LIMIT_S [MODE] [extra k3lite.bakeoff flags...]
#   LIMIT_S  wall-clock seconds for this whole call (e.g. 540 for a 9-minute device call)
#   MODE     both (default): measure, then sweep | measure: only (a) | sweep: only (b)
#   flags    shrink the grid, e.g. --tasks mqar16,mqar64 --mixers softmax,delta_rule,gated_delta_rule,kda
#            --d-models 64 --steps mqar=2000 (the MQAR default, MQAR_STEPS in k3lite/bakeoff/cli.py, and how
#            it was measured)
# Environment: WORKERS_PER_GPU (default min(3, cores per GPU - 2)), GPUS (default: all visible), MARGIN_S (default 120: no run
# starts later than LIMIT_S - MARGIN_S; runs in flight finish unless the hard limit hits first),
# BAKEOFF_COMMIT (the commit recorded in every run when the copy on the device has no .git), RESUME (stores of
# earlier calls, space-separated, merged in first), OUT (default runs/bakeoff; on the device machine pass its
# $OUT so that the store comes back).
set -o pipefail
limit_s=${1:?usage: bash scripts/gpu_bakeoff.sh LIMIT_S [both|measure|sweep] [flags...]}
mode=${2:-both}; shift; [ $# -gt 0 ] && shift
start=$(date +%s)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-runs/bakeoff}; mkdir -p "$OUT"   # runs/ is git-ignored scratch
gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
cores_per_gpu=$(( $(nproc) / gpus ))
wpg_auto=$(( cores_per_gpu - 2 )); [ $wpg_auto -gt 3 ] && wpg_auto=3; [ $wpg_auto -lt 1 ] && wpg_auto=1
# Three workers, not more: processes time-share one GPU, and more of them only add switching. Measured on one
# H200 (2026-12-01): 12 workers ran a d 64 gated run in ~280 s (~23 GPU-s each); 3 workers ran 3 such runs
# in 48 s including compilation (~16 GPU-s each).
wpg=${WORKERS_PER_GPU:-$wpg_auto}
margin=${MARGIN_S:-120}
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$OUT/gpu_info.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/gpu_info.txt"
cat "$OUT/gpu_info.txt"
# Refuses (exit 2, one line) a damaged store rather than training on top of it.
for previous in figures/bakeoff.json ${RESUME:-}; do
  if [ -f "$previous" ]; then
    python3 -m k3lite.bakeoff --merge "$previous" --out "$OUT/bakeoff.json" || exit
  fi
done
common=(--gpus "$gpus" --workers-per-gpu "$wpg" --out "$OUT/bakeoff.json")
left() { echo $(( limit_s - ($(date +%s) - start) )); }

if [ "$mode" = both ] || [ "$mode" = measure ]; then
  budget=$(( $(left) - 30 )); [ "$mode" = both ] && budget=$(( budget < 240 ? budget : 240 ))
  timeout -k 10 "$budget" python3 -m k3lite.bakeoff --measure "${common[@]}" "$@" 2>&1 | tee "$OUT/measure.log"
fi
if [ "$mode" = both ] || [ "$mode" = sweep ]; then
  hard=$(( $(left) - 25 ))
  deadline=$(( hard - margin )); [ $deadline -lt 30 ] && deadline=30
  echo "[gpu_bakeoff] sweep: no run starts after ${deadline}s, hard stop at ${hard}s"
  timeout -k 10 "$hard" python3 -m k3lite.bakeoff --deadline-s "$deadline" "${common[@]}" "$@" 2>&1 \
    | grep -v -i warn | tee "$OUT/sweep.log" | tail -n 120
fi
[ -f "$OUT/bakeoff.json" ] && python3 -m k3lite.bakeoff --merge "$OUT/bakeoff.json" --out figures/bakeoff.json
timeout 60 python3 scripts/plot_bakeoff.py --json "$OUT/bakeoff.json" --out-dir "$OUT/figures" 2>&1 | tail -n 5
python3 -m k3lite.bakeoff --table --store "$OUT/bakeoff.json" 2>&1 | tail -n 80
echo "[gpu_bakeoff] done in $(( $(date +%s) - start ))s"
