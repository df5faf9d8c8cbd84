"""The report's kernel section (records of task `kernel`): the roofs measured, each kernel's
share of its roof, convolution algorithms side by side with the fastest per shape, and the
kernel-size sweep. The same tables serve `dtbench kernels`' console summary."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from harness.facts.metrics import heading_of
from harness.report.document import Section, Table
from harness.report.units import format_number
from harness.report.view import RecordView, clean_text, several_machines

CONV_ALGORITHMS = ("direct", "im2col", "fft", "winograd", "nnpack")
FAMILY_TITLES = {"memory": "memory bandwidth (copy, triad)", "gemm": "GEMM",
                 "conv": "convolution", "lstm": "LSTM cell",
                 "attention": "causal attention (SDPA backends)"}
SWEEP_GROUP = "sweep"
# The roofline tables' metric columns after the time, in the units they are shown in.
ROOFLINE_COLUMNS = (("effective_flops", "GFLOP/s"), ("achieved_bandwidth", "GB/s"),
                    ("arithmetic_intensity", "FLOP/B"), ("attainable_flops", "GFLOP/s"),
                    ("share_of_roof", "%"))


def _giga(value: float | None) -> str:
    return format_number(None if value is None else value / 1e9)


def _percent(value: float | None) -> str:
    return format_number(None if value is None else value * 100)


def _milliseconds(view: RecordView) -> str:
    found = view.metrics.get("time")
    if found is None or found.value is None:
        return "-"
    text = format_number(found.value * 1e3)
    if found.ci_low is not None and found.ci_high is not None:
        text += f" [{format_number(found.ci_low * 1e3)}, {format_number(found.ci_high * 1e3)}]"
    return text


def _error(view: RecordView) -> str:
    value = view.value("max_rel_error")
    return "-" if value is None else f"{value:.1e}"


def _successes(views: list[RecordView], family: str | None = None) -> list[RecordView]:
    return [v for v in views if v.status == "success" and v.metrics.get("time")
            and (family is None or v.text("family") == family)]


def _varies(views: list[RecordView], name: str) -> bool:
    return len({view.text(name) for view in views}) > 1


def _grouped(views: list[RecordView], key: Callable[[RecordView], tuple[str, ...]]
             ) -> dict[tuple[str, ...], list[RecordView]]:
    groups: dict[tuple[str, ...], list[RecordView]] = {}
    for view in views:
        groups.setdefault(key(view), []).append(view)
    return groups


def _not_run(views: list[RecordView]) -> list[str]:
    """Failed records one by one; skipped ones (not applicable, not available) counted by
    algorithm and reason."""
    skipped = Counter((view.text("algorithm"), view.error) for view in views
                      if view.status == "skipped")
    notes = [f"{algorithm}: {reason} ({count} record{'s' if count > 1 else ''})"
             for (algorithm, reason), count in sorted(skipped.items())]
    return notes + [f"{view.label(machine=True)} {view.text('kernel')}: failed: "
                    f"{view.error or 'no reason recorded'}" for view in views
                    if view.status == "failed"]


def roofs_table(views: list[RecordView], machines: bool = False) -> Table:
    """Each distinct pair of roofs the records were measured under, by machine (with
    `machines`) and kernel set: each set's invocation measured its own."""
    rows: Counter[tuple[str, ...]] = Counter()
    for view in _successes(views):
        peak, bandwidth = view.value("peak_flops"), view.value("memory_bandwidth")
        kernel = clean_text(view.metrics["memory_bandwidth"].raw.get("kernel"), 20) \
            if "memory_bandwidth" in view.metrics else "-"
        ridge = format_number(peak / bandwidth) if peak and bandwidth else "-"
        rows[(*[view.machine_label] * machines, view.text("set"), view.text("backend"),
              view.precision, view.text("threads"), _giga(peak), _giga(bandwidth), kernel or "-",
              ridge)] += 1
    columns = ["machine"] * machines + [
        "set", "backend", "precision", "threads", f"{heading_of('peak_flops')} (GFLOP/s)",
        f"{heading_of('memory_bandwidth')} (GB/s)", "bandwidth from", "ridge point (FLOP/B)",
        "records"]
    return Table("Roofs", columns, [[*key, str(count)] for key, count in sorted(rows.items())],
                 [False] * (4 + machines) + [True, True, False, True, True],
                 intro="Measured in the same invocation as the kernels: the compute roof is the "
                       "best GEMM median (torch.mm and oneDNN over square sizes grown within a "
                       "time budget, as dtbench peak measures it), the bandwidth roof the better "
                       "of STREAM copy and "
                       "triad. Kernels left of the ridge point are bandwidth-bound.")


def roofline_table(family: str, views: list[RecordView], machines: bool = False) -> Table:
    """One row per measured kernel of a family: time, achieved rates, intensity, roof, share."""
    having = _successes(views, family)
    extra = [name for name in ("threads", "set") if _varies(having, name)]
    columns = ["machine"] * machines + ["kernel", "pass", "algorithm", "precision", *extra,
                                        f"{heading_of('time')} (ms)",
               *(f"{heading_of(name)} ({unit})" for name, unit in ROOFLINE_COLUMNS), "bound",
               heading_of("max_rel_error")]
    rows = []
    for view in having:
        seconds = view.value("time")
        nbytes = view.value("kernel_bytes")
        rate = nbytes / seconds if nbytes is not None and seconds else None
        share = view.metrics.get("share_of_roof")
        rows.append([*[view.machine_label] * machines, view.text("kernel"), view.text("pass"),
                     view.text("algorithm"), view.precision, *(view.text(name) for name in extra),
                     _milliseconds(view), _giga(view.value("effective_flops")), _giga(rate),
                     format_number(view.value("arithmetic_intensity")),
                     _giga(view.value("attainable_flops")), _percent(view.value("share_of_roof")),
                     clean_text(share.raw.get("bound"), 20) if share else "-", _error(view)])
    numeric = [False] * (4 + machines + len(extra)) + [True] * 6 + [False, True]
    return Table(f"Roofline: {FAMILY_TITLES.get(family, family)}", columns, rows, numeric,
                 notes=_not_run([v for v in views if v.text("family") == family]))


def _conv_key(view: RecordView) -> tuple[str, ...]:
    """What one row of algorithms side by side measured: the machine, kernel, pass,
    precision and threads."""
    return (view.machine_label, view.text("kernel"), view.text("pass"), view.precision,
            view.text("threads"))


def _sources(view: RecordView) -> str:
    sources = view.spec.get("sources")
    if not isinstance(sources, list) or not sources:
        return "-"
    first = clean_text(sources[0], 60)
    return first + (f" (+{len(sources) - 1})" if len(sources) > 1 else "")


def _fastest(members: list[RecordView]) -> tuple[RecordView | None, RecordView | None]:
    timed = [v for v in members if v.status == "success" and v.value("time")]
    fastest = min(timed, key=lambda v: v.value("time") or 0.0, default=None)
    direct = next((v for v in timed if v.text("algorithm") == "direct"), None)
    return fastest, direct


def _cell(members: list[RecordView], algorithm: str,
          show: Callable[[RecordView], str]) -> str:
    found = next((v for v in members if v.text("algorithm") == algorithm), None)
    if found is None:
        return "-"
    if found.status == "skipped":
        return "n/a"
    return show(found) if found.status == "success" else found.status


def conv_algorithms_table(views: list[RecordView], machines: bool = False) -> Table:
    """Per convolution shape and pass: effective GFLOP/s of each algorithm and the fastest."""
    convs = [v for v in views if v.text("family") == "conv" and v.text("group") != SWEEP_GROUP]
    groups = _grouped(convs, _conv_key)
    extra = ["threads"] if _varies(convs, "threads") else []
    columns = ["machine"] * machines + ["kernel", "from", "pass", "precision", *extra, "GFLOP",
                                        *CONV_ALGORITHMS, "fastest", "direct / fastest",
                                        "worst rel. error"]
    rows = []
    for (machine, kernel, pass_, precision, threads), members in groups.items():
        fastest, direct = _fastest(members)
        flops = next((v.value("kernel_flops") for v in members if v.value("kernel_flops")), None)
        errors = [v.value("max_rel_error") for v in members if v.text("algorithm") != "direct"
                  and v.value("max_rel_error") is not None]
        speedup = "-"
        if fastest and direct:
            speedup = format_number((direct.value("time") or 0) / (fastest.value("time") or 1))
        rows.append([*[machine] * machines, kernel, _sources(members[0]), pass_, precision,
                     *([threads] if extra else []), _giga(flops),
                     *(_cell(members, name, lambda v: _giga(v.value("effective_flops")))
                       for name in CONV_ALGORITHMS),
                     fastest.text("algorithm") if fastest else "-", speedup,
                     f"{max(errors):.1e}" if errors else "-"])
    numeric = [False] * (4 + machines + len(extra)) + [True] * (1 + len(CONV_ALGORITHMS)) + \
        [False, True, True]
    return Table("Convolution algorithms", columns, rows, numeric,
                 intro="Effective GFLOP/s (direct-convolution FLOPs / median time) of each "
                       "algorithm; n/a: the algorithm does not apply (see the roofline table's "
                       "notes). direct is torch's conv2d on channels_last tensors (oneDNN), "
                       "nnpack torch's NNPACK path with oneDNN off (forward only); im2col, fft "
                       "and winograd are written with torch tensor operations. The error is "
                       "the largest max |result - direct fp32| / max |direct fp32| among the "
                       "non-direct algorithms.")


def sweep_table(views: list[RecordView], machines: bool = False) -> Table:
    """The kernel-size sweep: time of each algorithm by kernel size and pass."""
    sweep = [v for v in views if v.text("family") == "conv" and v.text("group") == SWEEP_GROUP]
    groups = _grouped(sweep, _conv_key)
    columns = ["machine"] * machines + ["kernel", "pass", "precision",
                                        *(f"{a} (ms)" for a in CONV_ALGORITHMS), "fastest",
                                        "fft / direct"]
    rows = []
    for (machine, kernel, pass_, precision, _), members in groups.items():
        fastest, direct = _fastest(members)
        fft = next((v for v in members if v.text("algorithm") == "fft"
                    and v.status == "success"), None)
        ratio = "-"
        if fft and direct:
            ratio = format_number((fft.value("time") or 0) / (direct.value("time") or 1))
        rows.append([*[machine] * machines, kernel, pass_, precision,
                     *(_cell(members, name, lambda v: format_number((v.value("time") or 0) * 1e3))
                       for name in CONV_ALGORITHMS),
                     fastest.text("algorithm") if fastest else "-", ratio])
    return Table("Kernel-size sweep", columns, rows,
                 [False] * (3 + machines) + [True] * len(CONV_ALGORITHMS) + [False, True],
                 intro="One input, kernel sizes 3 to 11 at stride 1 with 'same' padding: the "
                       "test of Vasilache et al. 2015's claim that the larger the kernel, the "
                       "better FFT convolution does (its transforms cost the same for any "
                       "kernel size). Median time per call; fft / direct below 1 means FFT won.")


def kernel_section(views: list[RecordView], machines: bool | None = None) -> Section | None:
    """The kernel tables, or None when no record is a kernel record; a machine column in each
    where the report holds several machines (`machines`; by default where `views` do)."""
    kernels = [view for view in views if view.is_kernel]
    if not kernels:
        return None
    machines = several_machines(views) if machines is None else machines
    families = [f for f in FAMILY_TITLES if any(v.text("family") == f for v in kernels)]
    tables = [roofs_table(kernels, machines),
              *(roofline_table(f, kernels, machines) for f in families)]
    if any(v.text("family") == "conv" and v.text("group") != SWEEP_GROUP for v in kernels):
        tables.append(conv_algorithms_table(kernels, machines))
    if any(v.text("group") == SWEEP_GROUP for v in kernels):
        tables.append(sweep_table(kernels, machines))
    return Section("Kernels", tables, intro=(
        "Kernel microbenchmarks (dtbench kernels): times are medians of per-call samples with "
        "the 95% CI of the median. FLOPs are analytic, 2 per multiply-add, and for a "
        "convolution always those of direct convolution, so FFT and Winograd can pass the "
        "compute roof; bytes are every operand read once and every result written once. "
        "Roof = min(peak, intensity x bandwidth); share of roof = achieved / roof, which for "
        "copy (no FLOPs) is its bandwidth over the bandwidth roof."))

