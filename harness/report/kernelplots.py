"""The kernel section's plot: every kernel on a log-log roofline under the roofs measured
with it (harness/report/kernels.py has the tables)."""
from __future__ import annotations

from matplotlib import style
from matplotlib.lines import Line2D

from harness.report.plots import Plot, _figure, _label, _png
from harness.report.units import si
from harness.report.view import RecordView

KERNEL_MARKERS = {"conv": "o", "gemm": "s", "lstm": "^", "attention": "v", "memory": "D"}
ROOF_STYLES = ("-", "--", ":", "-.")


def kernel_roofline_plot(views: list[RecordView]) -> Plot:
    """Kernels on a log-log roofline: achieved FLOP/s against arithmetic intensity, under the
    compute and bandwidth roofs measured with them; drawn under matplotlib's default style."""
    with style.context("default"):
        return _kernel_roofline(views)


def _kernel_roofline(views: list[RecordView]) -> Plot:
    title = "Kernel roofline"
    points = []
    for view in views:
        flops, seconds = view.value("kernel_flops"), view.value("time")
        intensity = view.value("arithmetic_intensity")
        if (view.is_kernel and view.status == "success" and flops and seconds and intensity
                and intensity > 0):
            points.append((view, intensity, flops / seconds))
    if not points:
        return Plot(title, "", "No kernel record has FLOPs: the kernel roofline is omitted.")
    algorithms = sorted({view.text("algorithm") for view, _, _ in points})
    colours = {name: f"C{i % 10}" for i, name in enumerate(algorithms)}
    machines = sorted({view.machine_label for view, _, _ in points})
    figure = _figure(9.5, 5.0 * len(machines) + 0.6)
    low = min(x for _, x, _ in points) / 2
    high = max(x for _, x, _ in points) * 2
    for axes, machine in zip(figure.subplots(len(machines), 1, squeeze=False)[:, 0], machines,
                             strict=True):
        mine = [(view, x, y) for view, x, y in points if view.machine_label == machine]
        roofs = sorted({(view.text("precision"), view.value("peak_flops") or 0.0,
                         view.value("memory_bandwidth") or 0.0) for view, _, _ in mine})
        for index, (precision, peak, bandwidth) in enumerate(r for r in roofs if r[1] and r[2]):
            ridge = min(max(peak / bandwidth, low), high)
            axes.plot([low, ridge, high], [low * bandwidth, min(ridge * bandwidth, peak), peak],
                      color="black", linestyle=ROOF_STYLES[index % len(ROOF_STYLES)],
                      linewidth=1, label=_label(f"roof {precision}: {si(peak, 'FLOP/s')}, "
                                                f"{si(bandwidth, 'B/s')}", 70))
        for view, x, y in mine:
            axes.plot(x, y, linestyle="", marker=KERNEL_MARKERS.get(view.text("family"), "x"),
                      color=colours[view.text("algorithm")], alpha=0.75, markersize=5)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_title(_label(machine, 80), fontsize="medium")
        axes.set_xlabel("arithmetic intensity (FLOP per byte of compulsory traffic)")
        axes.set_ylabel("achieved FLOP/s (convolutions: effective)")
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small", loc="lower right")
    handles = [Line2D([], [], linestyle="", marker="o", color=colours[name], label=_label(name))
               for name in algorithms]
    handles += [Line2D([], [], linestyle="", marker=marker, markerfacecolor="none",
                       markeredgecolor="black", label=family)
                for family, marker in KERNEL_MARKERS.items()
                if any(view.text("family") == family for view, _, _ in points)]
    figure.legend(handles=handles, fontsize="small", loc="outside right upper")
    return Plot(title, "Log-log scatter plot of achieved FLOP per second against arithmetic "
                "intensity for every kernel record, coloured by algorithm, shaped by kernel "
                "family, under black roof lines: bandwidth times intensity, capped by the "
                "measured compute peak; a panel per machine.",
                "Roofline of the kernels: each point is one kernel, pass and algorithm; the "
                "roofs were measured in the same invocation (GEMM peak; the better of STREAM "
                "copy and triad). FFT and Winograd points can sit above the roof: their FLOP/s "
                "are effective (direct-convolution FLOPs / time). copy has no FLOPs and is not "
                "drawn.", _png(figure))
