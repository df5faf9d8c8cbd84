#!/usr/bin/env bash
# Add this machine to results/, the project's published comparison: the standard suite, the
# scaling suite (1 and 2 ranks over gloo and MPI), the collective sweep (gloo and MPI, 2
# ranks) and the kernel sets deepbench and sweep; then the generated report beside them.
# On a machine with a usable NVIDIA GPU it runs the GPU set instead: python -m harness.gpucheck,
# dtbench doctor, dtbench peak (fp32, bf16) and the standard suite on the GPU, with
# `nvidia-smi -q`, the GPU topology, `pip freeze` and the peak and gpucheck JSON saved beside
# the records.
# It refuses to start from a tree with changes or untracked files (exit 2): every record names
# its commit and the tree hash of the files that ran (harness.git_commit, harness.git_tree),
# and the script checks that each new record's tree is that commit's.
# Run it on a quiet machine (a record measured while other processes took CPU time is marked
# busy in every table); about 40 minutes on 2 cores.
# results/ is ignored by git but for this script and its README: the new machine folder goes
# in with `git add -f results/<machine>` (the script prints the command).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
dtbench=${DTBENCH:-dtbench}
python=${PYTHON:-python}

# The code that runs is a commit's, unchanged: no modified, staged or untracked file.
if ! $python -m harness.machine.clean_tree; then
    exit 2
fi
commit=$(git rev-parse HEAD)
tree=$(git rev-parse "HEAD^{tree}")

before=$(mktemp)
find results -name '*.json' | sort > "$before"
gpu=0
if command -v nvidia-smi > /dev/null 2>&1 \
        && $python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    gpu=1
fi
if [ "$gpu" = 1 ]; then
    scratch=$(mktemp -d)
    $python -m harness.gpucheck --out "$scratch/gpucheck" || echo "gpucheck: a check failed"
    $dtbench doctor --out results -q || echo "doctor: a check failed"
    $dtbench peak --backend cuda --json "$scratch/peak-fp32.json"
    $dtbench peak --backend cuda --precision bf16 --json "$scratch/peak-bf16.json"
    $dtbench run standard --backend cuda --out results -q
else
    ops=allreduce,allgather,reducescatter,broadcast
    $dtbench run standard --out results -q
    $dtbench run scaling --out results -q
    $dtbench comm --comm gloo -n 2 --op "$ops" --sizes 1K:64M --out results -q
    $dtbench comm --comm mpi --launcher mpirun -n 2 --op "$ops" --sizes 1K:64M --out results -q
    $dtbench kernels --set deepbench --out results -q
    $dtbench kernels --set sweep --out results -q
fi
new=$(comm -13 "$before" <(find results -name '*.json' | sort))
rm -f "$before"
# Every new record names this commit and this commit's tree.
if [ -n "$new" ]; then
    echo "$new" | $python -m harness.machine.clean_tree --records "$commit" "$tree"
fi
if [ "$gpu" = 1 ]; then
    for folder in $(echo "$new" | xargs -r -n1 dirname | sort -u); do
        nvidia-smi -q > "$folder/nvidia-smi-q.txt"
        nvidia-smi topo -m > "$folder/nvidia-smi-topo.txt" 2>&1 || true
        $python -c 'import json; from backends.gpu_topology import gpu_topology
print(json.dumps(gpu_topology(), indent=1))' > "$folder/gpu-topology.json"
        $python -m pip freeze > "$folder/pip-freeze.txt"
        cp "$scratch"/peak-*.json "$folder/"
        cp "$scratch/gpucheck/gpucheck.json" "$folder/" 2>/dev/null || true
    done
fi
$dtbench report results/ -o results/report.md
$dtbench report results/ -o results/report.html
added=$(echo "$new" | cut -d/ -f2 | sort -u)
echo "records added under: $added"
echo "to publish them: git add -f $(printf 'results/%s ' $added)results/report.md results/report.html"
