"""`dtbench predict --validate`: every measured multi-rank run predicted from calibration
records alone (single-rank runs of the same workload and threads per rank, `dtbench comm`
fits of the same backend and link) and set beside its measured step time.

Records without spec.strategy ran DistributedDataParallel: strategy `ddp`, with the run's
bucket size and compression. Records with spec.strategy and spec.strategy_options are
predicted with that strategy's model, the options the run was not given at its class's
defaults (the same values the run used); the link (nnodes, a rate in spec.env or
machine.interconnect) picks the comm calibration of the same link where one exists.
Single-rank runs are calibration, never predicted: the plain or ddp ones measure compute, a
strategy's own (fsdp at one rank) its per-step work (harness.predict.overhead).

Each prediction carries its 90% interval, drawn from the calibration's uncertainty
(harness.predict.interval); the table says whether the measured step fell inside it, the
summary the coverage over all rows and the median half-width, and the pairs of strategies
measured in one cell their predicted against their measured order (harness.predict.ranking).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from harness.core.errors import UsageError
from harness.predict.calibration import (
    Fit,
    comm_fits,
    compute_from_records,
    link_key,
    network_from_fits,
)
from harness.predict.context import Context, workload_facts
from harness.predict.interval import calibration_inputs
from harness.predict.machine import hardware_of
from harness.predict.overhead import overheads_from_records
from harness.predict.ranking import PairRow, agreement, pair_rows
from harness.predict.scaleout import Point, modelled, predict, strategy_options, unpriced
from harness.predict.spread import with_spread
from harness.predict.uncertain import LEVEL, coverage, inside, interval_text
from harness.records.record import metric
from harness.spec.kinds import TRAINING, record_kind
from harness.spec.specs import DDP_SPEC_OPTIONS, KEY_DEFAULTS
from harness.strategies import STRATEGIES

GOAL = 0.15  # docs/guide/prediction.md: at most 15% error on the configurations measured here


@dataclass(frozen=True)
class ValidationRow:
    """One measured run beside its prediction (or the reason there is none)."""

    record: dict[str, Any]
    strategy: str
    link: str
    measured: float | None
    point: Point | None = None
    ctx: Context | None = None
    note: str = ""
    forward_drift: float | None = None
    spread: str = ""  # where the between-run spread of the interval came from

    @property
    def interval(self) -> tuple[float, float] | None:
        """The prediction's 90% interval of the step time (None without one)."""
        return self.point.interval if self.point else None

    @property
    def inside(self) -> bool | None:
        """Whether the measured step fell inside the interval."""
        return inside(self.interval, self.measured)

    @property
    def predicted(self) -> float | None:
        return self.point.estimate.step_time if self.point and self.point.estimate else None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured."""
        if self.predicted is None or not self.measured:
            return None
        return (self.predicted - self.measured) / self.measured


def _metric(record: dict[str, Any], name: str) -> float | None:
    """The metric's value as a number, or None (absent, or not a number)."""
    value = (metric(record, name) or {}).get("value")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _step_time(record: dict[str, Any]) -> float | None:
    return _metric(record, "step_time")


def forward_drift(record: dict[str, Any], calibration: list[dict[str, Any]],
                  run_ids: tuple[str, ...], sharing: float) -> float | None:
    """measured forward phase / (the calibration runs' forward per sample x batch x core
    sharing) - 1: how much slower each rank computed than the single-rank run the prediction
    assumes, before any communication; None where a figure is missing."""
    measured = _metric(record, "phase_forward")
    batch = record["spec"].get("batch_per_rank")
    per_sample = sorted(f / r["spec"]["batch_per_rank"] for r in calibration
                        if r["run_id"] in run_ids
                        and isinstance(r["spec"].get("batch_per_rank"), int)
                        and r["spec"]["batch_per_rank"] > 0
                        and (f := _metric(r, "phase_forward")) is not None)
    if measured is None or not per_sample or not isinstance(batch, int) or batch <= 0:
        return None
    base = per_sample[len(per_sample) // 2] * batch * sharing
    return measured / base - 1 if base > 0 else None


def measured_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Successful multi-rank training runs with a step time, in a stable order."""
    found = [r for r in records if r.get("status") == "success"
             and record_kind(r) is TRAINING
             and isinstance(r["spec"].get("world_size"), int) and r["spec"]["world_size"] > 1
             and isinstance(r["spec"].get("batch_per_rank"), int)
             and r["spec"]["batch_per_rank"] > 0 and _step_time(r) is not None]
    return sorted(found, key=lambda r: (str(r["spec"].get("workload")), r["created_at"],
                                        r["run_id"]))


def _given_options(spec: dict[str, Any], strategy: str) -> dict[str, Any]:
    """The options the run was given: its strategy_options, and the spec fields of old
    records that the strategy's class declares as options."""
    cls = STRATEGIES.get(strategy)
    # ddp's options that old records keep as spec fields (the run-field declaration's)
    given = {key: spec[key] for key in DDP_SPEC_OPTIONS if key in spec and cls.option(key)}
    options = spec.get("strategy_options")
    if isinstance(options, dict):
        given.update(options)
    return given


def computing_ranks(record: dict[str, Any]) -> Any:
    """A node's ranks that run the model: on one node (or nodes that are one host), all but
    the parameter servers the record names (comm_bytes' roles). A server holds no model:
    between a round's pushes it waits, and applies one optimizer step to its shard, so it
    does not compete for a core."""
    spec = record["spec"]
    ranks = spec.get("nproc_per_node")
    roles = next((m.get("roles") for m in record.get("metrics", [])
                  if m.get("name") == "comm_bytes"), None)
    if not isinstance(ranks, int):
        return ranks
    # All the ranks of nodes that are one host compute on its cores, as one node's do.
    on_host = ranks * nodes_on_one_host(record)
    if isinstance(roles, list) and len(roles) == on_host and (
            spec.get("nnodes") == 1 or on_host > ranks):
        return sum(1 for role in roles if role != "server")
    return on_host


def nodes_on_one_host(record: dict[str, Any]) -> int:
    """How many of a run's nodes compute on the same machine's cores: all of them where every
    node reports one host name (network namespaces of one VM, as dtbench's two-host tests
    and benchmarks make them: a namespace keeps the host's name), else 1."""
    nnodes = record["spec"].get("nnodes")
    nodes = record.get("machine", {}).get("per_node")
    if not (isinstance(nnodes, int) and nnodes > 1 and isinstance(nodes, list)
            and len(nodes) == nnodes and all(isinstance(n, dict) for n in nodes)):
        return 1
    names = {node.get("hostname") for node in nodes}
    return nnodes if len(names) == 1 and isinstance(next(iter(names)), str) else 1


def core_demand(record: dict[str, Any]) -> float | None:
    """Computing ranks (computing_ranks) x threads / usable CPUs of the record's machine: how
    much of a node's cores the model's compute asks for (None where the record lacks one)."""
    spec, machine = record["spec"], record.get("machine", {})
    ranks, threads = computing_ranks(record), spec.get("threads")
    cpus = machine.get("cpus_usable") or machine.get("cpu_cores")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
               for v in (ranks, threads, cpus)):
        return None
    return ranks * threads / cpus


def core_sharing(record: dict[str, Any]) -> float:
    """How many times over a node's ranks ask for its cores (1 when they fit)."""
    return max(1.0, core_demand(record) or 1.0)


def cores_full(record: dict[str, Any]) -> bool:
    """A CPU run whose compute keeps every core of its node busy: gloo and MPI move and reduce
    the bytes on those same cores, so communication takes its time from compute instead of
    hiding behind it (a GPU computes while its copy engines and NCCL's kernels communicate)."""
    demand = core_demand(record)
    return record["spec"].get("backend") == "cpu" and demand is not None and demand >= 1


def validate_one(record: dict[str, Any], calibration: list[dict[str, Any]], fits: list[Fit],
                 algorithm: str = "ring") -> ValidationRow:
    """The prediction of one measured run from the calibration records."""
    spec = record["spec"]
    strategy = str(spec.get("strategy") or KEY_DEFAULTS["strategy"])  # older records: ddp
    link = link_key(record)
    row = ValidationRow(record, strategy, link, _step_time(record))
    if strategy not in modelled():
        return replace(row, note=f"no model of strategy {strategy}")
    threads = spec.get("threads") if isinstance(spec.get("threads"), int) else None
    try:
        facts = workload_facts(str(spec.get("workload")), str(spec.get("size")))
        compute = compute_from_records(
            calibration, workload=facts.workload, size=facts.size,
            precision=str(spec.get("precision")), backend=str(spec.get("backend")),
            threads=threads or None, batch=spec.get("batch_per_rank"))
        if compute is None:
            raise UsageError(f"no single-rank run of {facts.workload}/{facts.size} "
                             f"{spec.get('precision')} of its machine to calibrate compute")
        compute = with_spread(compute)
        network, used = network_from_fits(fits, str(spec.get("comm")), algorithm, link)
        given = _given_options(spec, strategy)
        options = strategy_options(strategy, given, strict=False)
    except UsageError as why:
        return replace(row, note=str(why))
    notes = []
    ignored = unpriced(strategy, given)
    if ignored:
        notes.append(f"options not modelled: {', '.join(ignored)}")
    if "overlap" in options and "overlap" not in given and cores_full(record):
        options = {**options, "overlap": False}
        notes.append("every core computing: communication not overlapped")
    sharing = core_sharing(record)
    if sharing > 1:
        shared = nodes_on_one_host(record)
        where = f" ({shared} nodes on one host)" if shared > 1 else ""
        notes.append(f"{spec.get('nproc_per_node', 0) * shared} ranks x {threads} thread(s) "
                     f"on {record['machine'].get('cpus_usable')} cores{where}: compute "
                     f"x{sharing:g}")
    if all(fit.link != link for fit in used):
        notes.append(f"comm calibrated on {used[0].link}, run on {link}")
    if "scaled" in compute.source:
        notes.append("compute scaled from another thread count")
    overheads = overheads_from_records(calibration, compute, workload=facts.workload,
                                       size=facts.size, precision=str(spec.get("precision")),
                                       backend=str(spec.get("backend")))
    if strategy in overheads:
        notes.append(f"{strategy}'s own work {overheads[strategy].seconds * 1e3:.1f} ms a step, "
                     "measured at 1 rank")
    uncertain, spread = calibration_inputs(calibration, compute, used, overheads)
    ctx = Context(facts, compute, network, int(spec["batch_per_rank"]), "weak",
                  str(spec.get("precision")), options, sharing, overheads,
                  comm=str(spec.get("comm")), uncertain=uncertain)
    point = predict(ctx, strategy, [int(spec["world_size"])])[0]
    if point.estimate is None:
        notes.append(point.reason)
    drift = forward_drift(record, calibration, compute.run_ids, sharing) \
        if STRATEGIES.get(strategy).local_forward and "scaled" not in compute.source else None
    return ValidationRow(record, strategy, link, row.measured, point, ctx, "; ".join(notes),
                         drift, spread)


def validate(measured: list[dict[str, Any]], calibration: list[dict[str, Any]],
             algorithm: str = "ring") -> list[ValidationRow]:
    """A row per measured multi-rank run of `measured`, each predicted from the calibration
    records of its own machine's hardware (never another machine's, never several pooled)."""
    by_machine: dict[str, list[dict[str, Any]]] = {}
    for record in calibration:
        by_machine.setdefault(hardware_of(record), []).append(record)
    fits = {key: comm_fits(records) for key, records in by_machine.items()}
    return [validate_one(record, by_machine.get(hardware_of(record), []),
                         fits.get(hardware_of(record), []), algorithm)
            for record in measured_runs(measured)]


def table_rows(rows: list[ValidationRow]) -> list[list[str]]:
    """Cells of the validation table: the run, measured and predicted ms, error, note."""
    cells = []
    for row in rows:
        spec = row.record["spec"]
        error = row.error
        cells.append([
            str(spec.get("workload")), str(spec.get("size")), row.strategy, str(spec.get("comm")),
            str(spec.get("world_size")), str(spec.get("launcher")), str(spec.get("nnodes")),
            row.link, f"{row.measured * 1e3:.1f}" if row.measured else "-",
            f"{row.predicted * 1e3:.1f}" if row.predicted is not None else "-",
            f"{error * 100:+.1f}%" if error is not None else "-",
            "yes" if error is not None and abs(error) <= GOAL else "no" if error is not None
            else "-", interval_text(row.interval, row.predicted),
            {True: "yes", False: "no", None: "-"}[row.inside],
            f"{row.forward_drift * 100:+.1f}%" if row.forward_drift is not None
            else "-", row.note or "-", row.record["run_id"]])
    return cells


HEADER = ("workload", "size", "strategy", "comm", "ranks", "launcher", "nodes", "link",
          "measured ms", "predicted ms", "error", "<=15%", f"{LEVEL:.0%} interval ms",
          "inside", "forward vs 1 rank", "note", "run")


def summary(rows: list[ValidationRow]) -> str:
    """'k of m predictions within 15%' and the worst error; the coverage of the intervals,
    where their between-run spread came from, and the rankings' agreement."""
    errors = [row.error for row in rows if row.error is not None]
    if not errors:
        return f"no run could be predicted ({len(rows)} measured multi-rank run(s))"
    within = sum(abs(e) <= GOAL for e in errors)
    worst = max(errors, key=abs)
    found = coverage((row.interval, row.predicted, row.measured) for row in rows
                     if row.predicted is not None)
    spreads = sorted({row.spread for row in rows if row.spread})
    return "\n".join([
        f"{within} of {len(errors)} predictions within {GOAL:.0%} of the measured step time "
        f"(worst {worst * 100:+.1f}%); {len(rows) - len(errors)} run(s) not predicted",
        found.line(), *(f"intervals: {line}" for line in spreads),
        agreement(ranked_pairs(rows))])


def ranked_pairs(rows: list[ValidationRow]) -> list[PairRow]:
    """Every pair of strategies measured in one cell (the same workload, size, precision,
    backend, comm, ranks, link, threads and batch), their measured throughput by run."""
    cells: dict[str, dict[str, tuple[list[float], Point | None]]] = {}
    for row in rows:
        spec = row.record["spec"]
        rate = _metric(row.record, "throughput")
        if rate is None or row.point is None:
            continue
        cell = (f"{spec.get('workload')} {spec.get('size')} {spec.get('precision')} "
                f"{spec.get('backend')} {spec.get('comm')}, {spec.get('world_size')} ranks, "
                f"{row.link}, {spec.get('threads')} thread(s), batch {spec.get('batch_per_rank')}")
        measured, _ = cells.setdefault(cell, {}).setdefault(row.strategy, ([], row.point))
        measured.append(rate)
    return pair_rows(cells)


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def validation_markdown(rows: list[ValidationRow], command: str) -> str:
    """The published validation table (results/predict/validation.md): every row, the summary
    and where each prediction's time goes; a function of the records alone, so it regenerates
    byte for byte."""
    numeric = {"ranks", "nodes", "measured ms", "predicted ms", "error", "forward vs 1 rank"}
    lines = ["# dtbench predict: predicted against measured step time", "",
             f"Regenerate: `{command}`. Each multi-rank run is predicted from the same "
             "folder's calibration records (single-rank runs, `dtbench comm` sweeps of the same "
             "backend, world size and link).", "",
             _md_row(list(HEADER)),
             "|" + "|".join("---:" if name in numeric else "---" for name in HEADER) + "|"]
    lines += [_md_row(cells) for cells in table_rows(rows)]
    pairs = ranked_pairs(rows)
    if pairs:
        from harness.predict.ranking import PAIR_HEADER, pair_cells

        lines += ["", "## Strategies ranked in one cell", "",
                  _md_row(list(PAIR_HEADER)), "|" + "|".join("---" for _ in PAIR_HEADER) + "|",
                  *(_md_row(cells) for cells in pair_cells(pairs))]
    estimates = [(row, row.point.estimate) for row in rows
                 if row.point is not None and row.point.estimate is not None]
    # The column of the strategies' measured own work appears only where one was priced.
    own = any(estimate.overhead > 0 for _, estimate in estimates)
    lines += ["", summary(rows).replace("\n", ".\n\n") + ".", "",
              "## Where the predicted step goes (ms)", "",
              "| run | compute | communication |" + (" strategy's own work |" if own else "")
              + " predicted | measured |", "|---|---:|---|" + ("---:|" if own else "")
              + "---:|---:|"]
    for row, estimate in estimates:
        comm = ", ".join(f"{label} {seconds * 1e3:.2f}" for label, seconds in
                         estimate.comm.items())
        cells = [row.record["run_id"], f"{estimate.compute_time * 1e3:.1f}", comm or "-"]
        cells += [f"{estimate.overhead * 1e3:.1f}"] if own else []
        lines.append(_md_row([*cells, f"{estimate.step_time * 1e3:.1f}",
                              f"{(row.measured or 0) * 1e3:.1f}"]))
    return "\n".join(lines) + "\n"
