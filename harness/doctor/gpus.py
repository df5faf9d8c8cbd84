"""Every GPU of the node checked at once: one child process per GPU measures its GEMM peak held
for a few seconds and its copy bandwidth (each on its own board, all at the same time, as a
training job loads them), each GPU is judged against its datasheet, and a GPU well below the
node's others is named, by the median-absolute-deviation rule of the fleet comparison applied
to the node's own GPUs. The NCCL check spans all of them, at sizes where busbw is bandwidth,
against the link NVML says joins them.

`python -m harness.doctor.gpus INDEX PRECISIONS` is the child: it prints its GPU's PeakResults
as one JSON line."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.doctor.checks import FAIL, PASS, NodeCheck, compute_checks, ratio_verdict
from harness.doctor.fleet import Figure
from harness.microbench.peak import PeakResult

ROOT = Path(__file__).resolve().parents[2]
SUSTAIN_S = 4.0
BUDGET_S = 2.0

Measured = dict[str, PeakResult] | str  # a GPU's results by precision, or why its probe failed


def _child(index: int, precisions: tuple[str, ...], timeout_s: float) -> Measured:
    """One GPU's probe in a process of its own (no CUDA context stays in the checking one)."""
    try:
        done = subprocess.run([sys.executable, "-m", "harness.doctor.gpus", str(index),
                               ",".join(precisions)], capture_output=True, text=True,
                              timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"the probe of GPU {index} took over {timeout_s:.0f} s"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {precision: PeakResult(**found) for precision, found in json.loads(lines[-1]).items()}


def measure_gpus(count: int, precisions: tuple[str, ...], timeout_s: float = 300.0,
                 probe: Callable[[int, tuple[str, ...], float], Measured] = _child
                 ) -> dict[int, Measured]:
    """Each of `count` GPUs probed by a child process of its own, all at once."""
    with ThreadPoolExecutor(max_workers=max(1, count)) as pool:
        found = pool.map(lambda index: probe(index, precisions, timeout_s), range(count))
        return dict(enumerate(found))


def gpu_checks(measured: Mapping[int, Measured], machine: Mapping[str, Any],
               precisions: tuple[str, ...]) -> list[NodeCheck]:
    """Each GPU against its datasheet (gpuN_gemm_*, gpuN_copy_bandwidth, gpuN_sm_clock_*), then
    the GPUs against each other."""
    checks: list[NodeCheck] = []
    for index, results in sorted(measured.items()):
        if isinstance(results, str):
            checks.append(NodeCheck(f"gpu{index}_probe", "compute", None, "", "runs", FAIL,
                                    results[:160]))
            continue
        checks += compute_checks("cuda", machine, precisions, results.__getitem__,
                                 prefix=f"gpu{index}_")
    return checks + slowest_gpu_checks(measured, precisions)


def slowest_gpu_checks(measured: Mapping[int, Measured],
                       precisions: tuple[str, ...]) -> list[NodeCheck]:
    """Per precision, the node's GPUs side by side: one that is worse than their median by more
    than 3.5 robust standard deviations and 10% (harness/doctor/fleet.Figure) fails, named."""
    checks = []
    for precision in precisions:
        figure = Figure(f"gemm_{precision}", "GFLOP/s", True, {
            f"gpu{index}": results[precision].flops / 1e9
            for index, results in sorted(measured.items()) if not isinstance(results, str)})
        if len(figure.values) < 2:
            continue
        figure.judge()
        spread = (max(figure.values.values()) - min(figure.values.values())) / figure.median
        if figure.outliers:
            named = ", ".join(f"{gpu} {figure.values[gpu]:,.0f} GFLOP/s ({share:+.0%})"
                              for gpu, share in sorted(figure.outliers.items()))
            checks.append(NodeCheck(f"gpu_outliers_{precision}", "compute", spread, "",
                                    "every GPU within 10% of the node's median", FAIL,
                                    f"{named} against the node's median "
                                    f"{figure.median:,.0f} GFLOP/s", False))
        else:
            judged = len(figure.values) >= 3
            checks.append(NodeCheck(f"gpu_outliers_{precision}", "compute", spread, "",
                                    "every GPU within 10% of the node's median", PASS,
                                    f"{len(figure.values)} GPUs, spread {spread:.1%} of the "
                                    "median" + ("" if judged else "; two GPUs: shown, not "
                                                "judged"), False))
    return checks


def nccl_check(busbw: float | None, sizes: tuple[int, ...], gpus: int,
               topology: Mapping[str, Any] | None, error: str | None = None) -> NodeCheck:
    """allreduce busbw over all the node's GPUs against the link between them (NVLink's links
    x speed, or the narrowest PCIe link; backends/gpu_topology.link_bandwidth)."""
    from backends.gpu_topology import link_bandwidth

    name = "allreduce_nccl"
    if error is not None or busbw is None:
        return NodeCheck(name, "network", None, "GB/s", "runs", FAIL, error or "no result")
    link = link_bandwidth(dict(topology) if topology else None)
    said = (f"{gpus} GPUs, best busbw (nccl-tests' definition) over "
            f"{', '.join(f'{s // 2**20} MiB' for s in sizes)}")
    if link is None:
        return NodeCheck(name, "network", busbw / 1e9, "GB/s", "the GPUs' link (unknown here)",
                         PASS, f"{said}; NVML gives no link to judge it by: compare it with "
                         "the fleet", higher_is_better=True)
    verdict, reason = ratio_verdict(busbw, link[0], "link")
    return NodeCheck(name, "network", busbw / 1e9, "GB/s",
                     f"{link[0] / 1e9:.0f} GB/s per direction ({link[1]})", verdict,
                     f"{said}; {reason}", higher_is_better=True)


def _probe(index: int, precisions: list[str]) -> dict[str, Any]:
    from backends.cuda import CUDABackend
    from harness.microbench.peak import measure_peak

    backend = CUDABackend()
    device = backend.bind(index)  # this GPU, and the cores of its NUMA node
    return {precision: measure_peak("cuda", precision, budget_s=BUDGET_S, device=device,
                                    sustain_s=SUSTAIN_S, backend=backend).as_dict()
            for precision in precisions}


if __name__ == "__main__":
    print(json.dumps(_probe(int(sys.argv[1]), sys.argv[2].split(","))))

