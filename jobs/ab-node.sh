#!/usr/bin/env bash
# A/B of the benchmark on one node: a base commit's tree, any other trees named, and this checkout
# (its working tree, uncommitted changes included), in one job, alternating rounds (base 1,
# other 1, new 1, base 2, ...) so that machine drift moves every arm alike; then the row-by-row
# table of tools.ab_summary.
# Usage:  bash jobs/ab-node.sh [BASE [OTHER...]] -- BENCH ARGS...
#   e.g.  bash jobs/ab-node.sh main -- --graph -b 1K -e 1M -f 4 --algo oneshot,twoshot
#         bash jobs/ab-node.sh main v1.tar v2.tar -- -b 256K -e 2M -f 2 --algo oneshot,twoshot
# BASE: a commit of this repository (default HEAD: the working tree's changes against their commit).
# OTHER: a commit, or a tarball of a tree (`git archive -o v1.tar BRANCH`: variants that this
# node's clone may not hold); its arm is named after the file (v1) or the commit's short hash.
# Env: as in node-env.sh; OUTDIR for the CSVs and summary.txt (default results/ab; emptied of
# earlier ab-* files first), ROUNDS (default 2).
set -euo pipefail
source "$(dirname "$0")/node-env.sh"
sources=()
while [[ $# -gt 0 && $1 != -- ]]; do sources+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
[[ ${#sources[@]} -eq 0 ]] && sources=(HEAD)
out=$(mkdir -p "${OUTDIR:-results/ab}" && cd "${OUTDIR:-results/ab}" && pwd)
rm -f "$out"/ab-*
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
names=() trees=() commits=()
for i in "${!sources[@]}"; do
  src=${sources[$i]}
  if [[ -f $src && $src == *.tar ]]; then
    name=$(basename "$src" .tar)
    commit=$(git get-tar-commit-id < "$src" || true)  # the commit `git archive` wrote in, if any
    mkdir "$work/$i" && tar -x -C "$work/$i" -f "$src"
  else
    name=$(git rev-parse --short "$src^{commit}")
    commit=$name
    mkdir "$work/$i" && git archive "$(git rev-parse --verify "$src^{commit}")" | tar -x -C "$work/$i"
  fi
  (( i == 0 )) && name=base
  if [[ ! $name =~ ^[A-Za-z0-9.+]+$ || $name == new ]] || [[ " ${names[*]} " == *" $name "* ]]; then
    echo "ab-node.sh: arm name '$name' (from $src) must be letters, digits, '.' or '+', unique, not 'new'" >&2
    exit 2
  fi
  names+=("$name") trees+=("$work/$i") commits+=("${commit:0:7}")
  echo "== arm $name: $src in $work/$i"
done
names+=(new) trees+=("$PWD") commits+=("${MPIRING_COMMIT:-}")
echo "== arm new: $PWD ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ", with uncommitted changes"))"
for tree in "${trees[@]}"; do  # the compiled replay, in each tree (without it replays run in Python)
  (cd "$tree" && "$PY" -m tools.build_hotpath --check) || echo "($tree: not built, the replays run in Python)"
done
bench=(--no-plot --progress off --output-dir "$out")
for round in $(seq "${ROUNDS:-2}"); do
  for i in "${!names[@]}"; do
    echo "== round $round: ${names[$i]}"
    # An arm's tree is no checkout: the results take its commit from MPIRING_COMMIT (unknown if empty).
    (cd "${trees[$i]}" && PYTHONPATH="${trees[$i]}" MPIRING_COMMIT="${commits[$i]}" run "$NGPUS" "$PY" -m mpiring.bench "$@" "${bench[@]}" \
      --name "ab-${names[$i]}-$round")
  done
done
"$PY" -m tools.ab_summary "$out" --out "$out/summary.txt"
