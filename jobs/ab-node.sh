#!/usr/bin/env bash
# A/B of the benchmark on one node: a base commit's tree against this checkout (its working tree,
# uncommitted changes included), in one job, alternating rounds (base 1, new 1, base 2, new 2, ...)
# so that machine drift moves both arms alike; then the row-by-row table of tools.ab_summary.
# Usage:  bash jobs/ab-node.sh [BASE] -- BENCH ARGS...
#   e.g.  bash jobs/ab-node.sh main -- --graph -b 1K -e 1M -f 4 --algo oneshot,twoshot
# BASE: a commit of this repository (default HEAD: the working tree's changes against their commit).
# Env: as in node-env.sh; OUTDIR for the CSVs and summary.txt (default results/ab; emptied of
# earlier ab-* files first), ROUNDS (default 2).
set -euo pipefail
source "$(dirname "$0")/node-env.sh"
base=HEAD
if [[ $# -gt 0 && $1 != -- ]]; then base=$1; shift; fi
[[ ${1:-} == -- ]] && shift
out=$(mkdir -p "${OUTDIR:-results/ab}" && cd "${OUTDIR:-results/ab}" && pwd)
rm -f "$out"/ab-base-* "$out"/ab-new-*
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git archive "$(git rev-parse --verify "$base^{commit}")" | tar -x -C "$tree"
echo "== base $(git rev-parse --short "$base") in $tree; new: $PWD ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ", with uncommitted changes"))"
for arm in "$tree" "$PWD"; do  # the compiled replay, in each tree (without it replays run in Python)
  (cd "$arm" && "$PY" -m tools.build_hotpath --check) || echo "($arm: not built, the replays run in Python)"
done
bench=(--no-plot --progress off --output-dir "$out")
for round in $(seq "${ROUNDS:-2}"); do
  echo "== round $round: base"
  (cd "$tree" && PYTHONPATH="$tree" run "$NGPUS" "$PY" -m mpiring.bench "$@" "${bench[@]}" --name "ab-base-$round")
  echo "== round $round: new"
  run "$NGPUS" "$PY" -m mpiring.bench "$@" "${bench[@]}" --name "ab-new-$round"
done
"$PY" -m tools.ab_summary "$out" --out "$out/summary.txt"
