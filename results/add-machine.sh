#!/usr/bin/env bash
# Add this machine to results/, the project's published comparison: the standard suite, the
# scaling suite (1 and 2 ranks over gloo and MPI), the collective sweep (gloo and MPI, 2
# ranks) and the kernel sets deepbench and sweep; then the generated report beside them.
# Run it from a clean checkout on a quiet machine (a record measured while other processes
# took CPU time is marked busy in every table); about 40 minutes on 2 cores.
# results/ is ignored by git but for this script and its README: the new machine folder goes
# in with `git add -f results/<machine>` (the script prints the command).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
dtbench=${DTBENCH:-dtbench}
ops=allreduce,allgather,reducescatter,broadcast
before=$(mktemp)
find results -name '*.json' | sort > "$before"
$dtbench run standard --out results -q
$dtbench run scaling --out results -q
$dtbench comm --comm gloo -n 2 --op "$ops" --sizes 1K:64M --out results -q
$dtbench comm --comm mpi --launcher mpirun -n 2 --op "$ops" --sizes 1K:64M --out results -q
$dtbench kernels --set deepbench --out results -q
$dtbench kernels --set sweep --out results -q
$dtbench report results/ -o results/report.md
$dtbench report results/ -o results/report.html
added=$(comm -13 "$before" <(find results -name '*.json' | sort) | cut -d/ -f2 | sort -u)
rm -f "$before"
echo "records added under: $added"
echo "to publish them: git add -f $(printf 'results/%s ' $added)results/report.md results/report.html"
