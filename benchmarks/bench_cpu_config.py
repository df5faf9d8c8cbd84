"""The best CPU configuration, measured side by side: dtbench's default against a plain eager
loop, a torch.compile loop and IPEX (from a torch 2.8 environment), for ResNet-50 and hep_cnn
in fp32 and bf16.

Every configuration lives in its own process for the whole comparison (IPEX needs its own
torch), warms up until its step times settle (harness/rank/loops.steady), then the
processes take turns: each round asks every one, in rotated order, for a few timed steps, so
drift on a shared host touches all alike. Each line is its median step as a ratio to the
fastest; first-step (compile, IPEX rewrite) and warm-up seconds are shown apart. Prints
figures and asserts nothing (a benchmark).

    python benchmarks/bench_cpu_config.py --ipex-python /opt/ipex/bin/python \\
        --out results/cpu-config

`dtbench` is what `dtbench run` trains with no options: channels_last, the tuned allocator,
and IPEX and torch.compile where `--ipex auto` / `--compile auto` found them faster on this
hardware (`--decide` measures that first, as `dtbench run --ipex auto --compile auto` would).
`dtbench-ipex` is the same default in the ipex environment, where IPEX can be chosen.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("dtbench", "eager", "compile", "ipex", "dtbench-ipex")
NEEDS_IPEX = ("ipex", "dtbench-ipex")
MAX_WARMUP = 25


# ----------------------------------------------------------------------------- worker side

def _plain_step(workload: Any, size: str, precision: str, mode: str) -> Any:
    """A user's loop: the model as built, SGD, bf16 autocast where asked; no harness."""
    import torch

    model = workload.build_model(size)
    model.train()
    optimizer = workload.optimizer(model, size)
    dtype = torch.bfloat16 if precision == "bf16" else None
    if mode == "compile":
        model = torch.compile(model)
    elif mode == "ipex":
        import intel_extension_for_pytorch as ipex  # type: ignore[import-not-found]

        model, optimizer = ipex.optimize(model, optimizer=optimizer,
                                         dtype=dtype or torch.float32)

    def step(inputs: Any, targets: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            loss = workload.loss(model(inputs), targets)
        loss.backward()
        optimizer.step()

    return step


def _dtbench_step(workload_name: str, size: str, precision: str, batch: int) -> tuple[Any, dict]:
    """dtbench's default configuration: the spec `dtbench run` plans with no options, its
    compile choice settled as the runner settles it, and the Trainer's step."""
    from harness.rank.trainer import Trainer
    from harness.run.autocompile import settle_all
    from harness.run.plan import plan_runs

    spec = plan_runs(None, {"workload": [workload_name], "size": [size],
                            "precision": [precision], "batch_size": [batch]})[0][0]
    spec, choices = settle_all(spec)
    trainer = Trainer(spec, 0, 0, None)

    def step(inputs: Any, targets: Any) -> None:
        trainer.step(*trainer.to_device(inputs, targets))

    return step, {**{name: c.as_dict() for name, c in choices.items()},
                  "threads": spec.threads, "channels_last": spec.channels_last}


def worker(config: str, workload_name: str, size: str, precision: str, batch: int) -> None:
    """Serve `measure N` requests on stdin with JSON lines on stdout."""
    import torch

    from harness.rank.loops import steady
    from workloads import get_workload

    torch.manual_seed(0)
    workload = get_workload(workload_name)
    info: dict[str, Any] = {"torch": torch.__version__}
    try:
        if config.startswith("dtbench"):
            step, settings = _dtbench_step(workload_name, size, precision, batch)
            info.update(settings)
        else:
            step = _plain_step(workload, size, precision, config)
    except Exception as exc:  # noqa: BLE001 - reported as this configuration's result
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return
    inputs, targets = workload.synthetic_batch(size, batch, "cpu",
                                               torch.Generator().manual_seed(0))
    warm: list[float] = []
    started = time.perf_counter()
    while len(warm) < MAX_WARMUP and not (len(warm) >= 3 and steady(warm)):
        begun = time.perf_counter()
        step(inputs, targets)
        warm.append(time.perf_counter() - begun)
    info.update(first_step_s=warm[0], warmup_s=time.perf_counter() - started,
                warmup_steps=len(warm), steady=steady(warm))
    print(json.dumps({"ready": info}), flush=True)
    for line in sys.stdin:
        steps = int(line.split()[1])
        times = []
        for _ in range(steps):
            begun = time.perf_counter()
            step(inputs, targets)
            times.append(time.perf_counter() - begun)
        print(json.dumps({"times": times}), flush=True)


# ----------------------------------------------------------------------------- driver side

class Worker:
    def __init__(self, config: str, python: str, args: argparse.Namespace, workload: str,
                 precision: str, batch: int) -> None:
        self.config = config
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [python, __file__, "--worker", config, workload, args.size, precision, str(batch)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.times: list[float] = []
        self.info: dict[str, Any] = {}
        self.error: str | None = None

    def _reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"{self.config} exited with {self.process.wait()}")

    def ready(self) -> None:
        try:
            reply = self._reply()
            self.info = reply["ready"] if "ready" in reply else {}
            self.error = reply.get("error")
        except (RuntimeError, ValueError) as exc:
            self.error = str(exc)

    def measure(self, steps: int) -> None:
        if self.error is not None:
            return
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(f"measure {steps}\n")
            self.process.stdin.flush()
            self.times.extend(self._reply()["times"])
        except (RuntimeError, OSError, ValueError, KeyError) as exc:
            self.error = str(exc)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def compare(args: argparse.Namespace, workload: str, precision: str) -> list[dict[str, Any]]:
    batch = args.batch.get(workload, 16)
    pythons = {config: (args.ipex_python if config in NEEDS_IPEX else sys.executable)
               for config in args.configs}
    workers = []
    for config in args.configs:
        if config in NEEDS_IPEX and not args.ipex_python:
            continue
        print(f"  {workload} {precision}: starting {config}", file=sys.stderr, flush=True)
        worker_ = Worker(config, pythons[config], args, workload, precision, batch)
        worker_.ready()  # one at a time: warm-ups must not share the cores
        workers.append(worker_)
    for round_ in range(args.rounds):
        turn = workers[round_ % len(workers):] + workers[:round_ % len(workers)]
        for worker_ in turn:
            worker_.measure(args.steps)
    for worker_ in workers:
        worker_.close()
    rows = []
    for worker_ in workers:
        median = statistics.median(worker_.times) if worker_.times else None
        rows.append({"workload": workload, "precision": precision, "batch": batch,
                     "config": worker_.config, "step_s": median,
                     "samples_per_s": batch / median if median else None,
                     "steps": len(worker_.times), "error": worker_.error, **worker_.info})
    best = min((r["step_s"] for r in rows if r["step_s"]), default=None)
    for row in rows:
        row["ratio_to_fastest"] = best / row["step_s"] if best and row["step_s"] else None
    return rows


def decide(args: argparse.Namespace, workload: str, precision: str) -> None:
    """`dtbench run --ipex auto --compile auto` for this configuration, in each environment:
    measures and caches the choices that the default then follows."""
    for python in filter(None, (sys.executable, args.ipex_python)):
        subprocess.run([python, "-m", "harness", "run", "-w", workload, "--size", args.size,
                        "--precision", precision, "--batch-size",
                        str(args.batch.get(workload, 16)), "--ipex", "auto", "--compile", "auto",
                        "--steps", "2", "--warmup", "1", "-q", "--out", str(args.scratch)],
                       cwd=ROOT, check=False)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | precision | configuration | torch | step s | samples/s | "
             "ratio to fastest | first step s | warm-up s (steps) | notes |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['workload']} | {r['precision']} | {r['config']} | "
                         f"{r.get('torch', '-')} | - | - | - | - | - | failed: "
                         f"{str(r['error'])[:160]} |")
            continue
        notes = [f"{name} {'on' if r[name]['enabled'] else 'off'} ({r[name]['source']})"
                 for name in ("ipex", "compile") if isinstance(r.get(name), dict)]
        if not r.get("steady", True):
            notes.append("not steady")
        lines.append(
            f"| {r['workload']} | {r['precision']} | {r['config']} | {r.get('torch', '-')} | "
            f"{r['step_s']:.3f} | {r['samples_per_s']:.1f} | {r['ratio_to_fastest']:.2f} | "
            f"{r['first_step_s']:.1f} | {r['warmup_s']:.1f} ({r['warmup_steps']}) | "
            f"{', '.join(notes)} |")
    return "\n".join(lines)


def fingerprint() -> dict[str, Any]:
    from harness.machine.hardware import cpu_fingerprint

    return cpu_fingerprint()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        config, workload, size, precision, batch = sys.argv[2:7]
        worker(config, workload, size, precision, int(batch))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-w", "--workload", action="append", choices=("resnet50", "hep_cnn"))
    parser.add_argument("--precision", action="append", choices=("fp32", "bf16"))
    parser.add_argument("--config", dest="configs", action="append", choices=CONFIGS)
    parser.add_argument("--size", default="small")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per turn")
    parser.add_argument("--ipex-python", default=os.environ.get("DTBENCH_IPEX_PYTHON"),
                        help="python of an environment with torch 2.8 and IPEX 2.8")
    parser.add_argument("--decide", action="store_true",
                        help="run `dtbench run --compile auto` first for each configuration")
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.json")
    args = parser.parse_args()
    args.workload = args.workload or ["resnet50", "hep_cnn"]
    args.precision = args.precision or ["fp32", "bf16"]
    args.configs = args.configs or list(CONFIGS)
    args.batch = {"resnet50": 16, "hep_cnn": 32}
    args.scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_cpu_config"
    machine = fingerprint()
    print(f"# {machine.get('cpu_model')} family {machine.get('cpu_family')} model "
          f"{machine.get('cpu_model_number')}, {os.cpu_count()} CPUs", flush=True)
    rows: list[dict[str, Any]] = []
    for workload in args.workload:
        for precision in args.precision:
            if args.decide:
                decide(args, workload, precision)
            rows.extend(compare(args, workload, precision))
            print(table([r for r in rows if (r["workload"], r["precision"]) ==
                         (workload, precision)]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        body = {"machine": machine, "rounds": args.rounds, "steps_per_turn": args.steps,
                "size": args.size, "rows": rows}
        args.out.with_suffix(".json").write_text(json.dumps(body, indent=1, default=str) + "\n")
        header = (f"# Best CPU configuration\n\nMachine: {machine.get('cpu_model')} (family "
                  f"{machine.get('cpu_family')}, model {machine.get('cpu_model_number')}), "
                  f"{os.cpu_count()} CPUs. `python benchmarks/bench_cpu_config.py "
                  f"--ipex-python VENV/bin/python --decide --rounds {args.rounds} --steps "
                  f"{args.steps}` ({args.size} "
                  "presets); each line's median step as a ratio to the fastest of its "
                  "workload and precision.\n\n")
        args.out.with_suffix(".md").write_text(header + table(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
