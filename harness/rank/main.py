"""Entry point of one rank, whatever started it: `python -m harness.rank.main --spec F --run-dir D`.

Rank 0 writes every rank's measurements (gathered over the process group) to result.json;
each rank leaves a status file, so the launching process can tell which rank failed and why.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from harness.core.errors import RunFailed, SkipRun, status_of
from harness.core.files import write_atomic
from harness.core.spec import task_from_dict
from harness.core.text import one_line

# A rank's exit code when its run was skipped (1 is a failure).
RANK_SKIPPED = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.rank.main")
    parser.add_argument("--spec", required=True, help="spec JSON written by dtbench")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--log", default=None, help="MLPerf log file (time-to-train)")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    from harness.rank.environment import RankReporter, gather_results, identity_from_env, init_comm
    from harness.rank.loops import run_throughput, run_time_to_train
    from harness.strategies.meter import CommMeter

    run_dir = Path(args.run_dir)
    # Ranks on other hosts may not see node 0's run directory: the spec also travels in the
    # environment, and reports go to a local directory of the same name.
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = Path(args.spec)
    document = json.loads(spec_path.read_text() if spec_path.exists()
                          else os.environ["DTBENCH_SPEC_JSON"])
    spec: Any = task_from_dict(document)
    who = identity_from_env()
    reporter = RankReporter(run_dir, who)
    code = 0
    try:
        if who.world_size != spec.world_size:
            raise RunFailed(f"launcher started {who.world_size} ranks, spec asks for "
                            f"{spec.world_size}")
        meter = CommMeter() if spec.kind == "train" else None
        init_comm(spec, who, args.timeout, meter)
        reporter.heartbeat("init", 0, 0, force=True)
        if spec.kind == "comm":
            from harness.microbench.collectives import run_collectives

            device = torch.device("cuda", who.local_rank) if spec.comm == "nccl" \
                else torch.device("cpu")
            if spec.comm != "nccl":
                torch.set_num_threads(max(1, spec.threads))
            result_dict = run_collectives(spec, who.rank, who.world_size, device,
                                          reporter.heartbeat)
        elif spec.mode == "ttt":
            result_dict = run_time_to_train(spec, Path(args.log) if args.log else None,
                                            who.rank, who.local_rank,
                                            progress=reporter.heartbeat, meter=meter).as_dict()
        else:
            result_dict = run_throughput(spec, who.rank, who.local_rank,
                                         progress=reporter.heartbeat, meter=meter).as_dict()
        if spec.nnodes > 1 and who.local_rank == 0:
            # Every node's own fingerprint, not rank 0's only: nodes may differ.
            from harness.records.fingerprint import machine_info, node_summary

            result_dict["node"] = node_summary(machine_info())
        gathered = gather_results(result_dict) or [result_dict]
        if who.rank == 0:
            write_atomic(run_dir / "result.json", json.dumps(gathered))
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
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a torn-down group must not mask the result
                pass
    return code


if __name__ == "__main__":
    sys.exit(main())
