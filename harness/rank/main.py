"""Entry point of one rank, whatever started it: `python -m harness.rank.main --run-dir D`.

The spec comes from the environment the supervisor set (harness/rundir.py). Rank 0
writes every rank's measurements (gathered over the process group) to the run directory;
each rank leaves its status there, so the supervisor can tell which rank failed and why. A
run without a communication backend is one rank that joins no process group.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from harness.core.errors import RunFailed, SkipRun, status_of
from harness.core.text import one_line
from harness.rundir import RankReport, RunDir, read_spec

# A rank's exit code when its run was skipped (1 is a failure).
RANK_SKIPPED = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.rank.main")
    parser.add_argument("--run-dir", required=True, help="the run directory of the supervisor")
    parser.add_argument("--log", default=None, help="MLPerf log file (time-to-train)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--comm-timeout", type=float, default=600.0,
                        help="NCCL's watchdog timeout (the process group's, for NCCL only)")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    from harness.comm.meter import COUNTED, CommMeter
    from harness.comm.nccl_log import debug_environment, read_rank_log
    from harness.comm.wire import LOST_DIR_VAR
    from harness.rank.environment import (
        RankReporter,
        bind_device,
        gather_results,
        identity_from_env,
        init_comm,
    )
    from harness.rank.loops import run_throughput, run_time_to_train
    from harness.strategies.worker_loss import tolerates_loss

    run_dir = RunDir.join(args.run_dir)
    spec = read_spec()
    who = identity_from_env()
    reporter = RankReporter(run_dir, who)
    code = 0
    tolerant = False
    try:
        if who.world_size != spec.world_size:
            raise RunFailed(f"launcher started {who.world_size} ranks, spec asks for "
                            f"{spec.world_size}")
        tolerant = tolerates_loss(spec)
        if tolerant:
            os.environ[LOST_DIR_VAR] = str(run_dir.path)  # where servers learn of lost workers
        # Only a backend the counting wrapper wraps counts (gloo, MPI, NCCL): a meter beside
        # any other would record a zero for every step (harness/run/collect.py notes why).
        meter = CommMeter() if spec.kind == "train" and spec.comm in COUNTED \
            else None
        nccl_log = run_dir.path / f"nccl-rank{who.rank}.log"
        own_debug = debug_environment(nccl_log) \
            if spec.comm == "nccl" and spec.kind == "train" else {}
        os.environ.update(own_debug)  # read by NCCL when it first logs
        device = bind_device(spec, who)
        if spec.comm != "none":
            init_comm(spec, who, args.timeout, meter, device, args.comm_timeout)
        reporter.heartbeat("init", 0, 0, force=True)
        report: RankReport
        if spec.kind == "comm":
            from harness.microbench.collectives import run_collectives

            device = device if spec.comm == "nccl" else torch.device("cpu")
            if spec.comm != "nccl":
                torch.set_num_threads(max(1, spec.threads))
            report = run_collectives(spec, who.rank, who.world_size, device, reporter.heartbeat)
        elif spec.mode == "ttt":
            report = run_time_to_train(spec, Path(args.log) if args.log else None, who.rank,
                                       who.local_rank, progress=reporter.heartbeat, meter=meter)
        else:
            report = run_throughput(spec, who.rank, who.local_rank,
                                    progress=reporter.heartbeat, meter=meter)
        if own_debug and not isinstance(report, dict):
            report.nccl = read_rank_log(nccl_log)
        if spec.nnodes > 1 and who.local_rank == 0:
            # Every node's own fingerprint, not rank 0's only: nodes may differ.
            from harness.machine.fingerprint import machine_info, node_summary
            from harness.spec.specs import performance_env

            seen = {k: v for k, v in os.environ.items() if k not in own_debug}
            node = node_summary(machine_info(), performance_env(seen))
            if isinstance(report, dict):
                report["node"] = node
            else:
                report.node = node
        if tolerant:
            # A lost worker cannot join a gather: each rank leaves its own result, and the
            # supervisor assembles them.
            run_dir.write_own_result(who.rank, report)
            reporter.finish("success")
        else:
            gathered = gather_results(report) or [report]
            if who.rank == 0:
                run_dir.write_results(gathered)
            reporter.finish("success")
            if dist.is_initialized():
                dist.barrier()  # nobody tears the group down while a peer still uses it
    except Exception as exc:  # noqa: BLE001 - reported to the launching process
        status, reason = status_of(exc)
        reporter.finish(status, one_line(reason))
        if not isinstance(exc, (SkipRun, RunFailed)):
            traceback.print_exc(file=sys.stderr)
        code = RANK_SKIPPED if status == "skipped" else 1
    finally:
        if tolerant:
            # A server's receiving thread may still wait on a lost worker, and tearing the
            # group down would wait with it: the results are written, so leave now.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a torn-down group must not mask the result
                pass
    return code


if __name__ == "__main__":
    sys.exit(main())
