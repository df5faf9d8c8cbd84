"""Any torchvision model's facts, `predict --topology` end to end, and the published-results
validation table: every row sourced, none carrying its own tuning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.commands.cli import main
from harness.core.errors import UsageError
from harness.predict.links import find_link
from harness.predict.published import (
    COMPUTE_KEYS,
    ROW_KEYS,
    TABLE,
    PublishedRow,
    load_table,
    predict_row,
    range_problems,
    row_inputs,
    row_problems,
    summary,
)
from harness.predict.topology import parse_topology
from harness.predict.uncertain import DRAWS
from harness.strategies import STRATEGIES
from workloads.external import model_name
from workloads.layers import layer_table

TOPOLOGY = "devices=4,intra=pcie3,inter=25gbe-roce"


def test_torchvision_models_are_counted_from_the_model() -> None:
    vgg = layer_table("torchvision:vgg16", "full")
    # VGG-16: 138,357,544 parameters; 15.47 GMAC forward at 224x224, x2 FLOPs, x3 with backward
    assert sum(layer.parameters for layer in vgg) == 138_357_544
    assert sum(layer.flops for layer in vgg) == pytest.approx(3 * 2 * 15.47e9, rel=0.01)
    assert vgg[-1].name == "classifier.6" and vgg[0].name == "features.0"
    inception = layer_table("torchvision:Inception_V3", "full")  # 299x299 input
    assert sum(layer.parameters for layer in inception) == 27_161_264
    with pytest.raises(UsageError, match="did you mean vgg19"):
        model_name("torchvision:vgg17")


def test_predict_torchvision_model_on_a_topology(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    args = ["predict", "torchvision:vgg16", "--topology", TOPOLOGY, "--strategy", "ddp",
            "--ranks", "1,16,128", "--compute-curve", "32:144,64:154", "--batch-size", "64",
            "--fusion", "64:5", "--json", str(tmp_path / "p.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "25gbe-roce" in out and "Horovod fusion, 64 MB every 5 ms" in out
    records = json.loads((tmp_path / "p.json").read_text())
    assert [r["spec"]["world_size"] for r in records] == [1, 16, 128]
    efficiency = [float(line.split()[4]) for line in out.splitlines()  # after "90% step ms": -
                  if line.split()[:1] in (["16"], ["128"])]
    assert len(efficiency) == 2 and 0 < efficiency[1] < efficiency[0] <= 1


@pytest.mark.parametrize(("args", "words"), [
    (["torchvision:vgg17", "--network", "10GbE"], "unknown torchvision model"),
    (["torchvision:vgg16", "--topology", "devices=4,inter=warp-drive"], "unknown link"),
    (["torchvision:vgg16", "--topology", "devices=4,inter=ib-edr", "--ranks", "6"],
     "do not divide 6 ranks"),
    (["torchvision:vgg16", "--algorithm", "hierarchical", "--network", "ib-edr"],
     "needs --topology"),
])
def test_predict_topology_errors_are_one_line(args: list[str], words: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", *args, "--compute-rate", "1e13", "--batch-size", "32"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_every_published_row_is_sourced_and_carries_no_tuning() -> None:
    document = load_table()
    rows, sources = document["rows"], document["sources"]
    assert len({row["id"] for row in rows}) == len(rows) >= 15
    curves: dict[tuple[str, str], str] = {}
    for row in rows:
        assert row_problems(row, sources) == [], row["id"]
        assert set(row) <= ROW_KEYS and set(row["compute"]) <= COMPUTE_KEYS
        # the cluster is named presets only: no α, β or bandwidth of a row's own
        parse_topology(row["topology"])
        for part in row["topology"].split(","):
            key, _, value = part.partition("=")
            if key in ("intra", "inter"):
                assert find_link(value) is not None
        # an engine's documented defaults, not a fitted cycle or threshold
        assert row.get("fusion") in (None, "64:5", "128:1", "horovod")
        # layout options only (how many server ranks and groups), no model knobs
        assert set(row.get("options") or {}) <= {"servers", "groups"}
        assert STRATEGIES.get(row["strategy"]) is not None
        # one source's figure for one model is the same in every row that uses it
        key = (row["compute"]["source"], row["compute"].get("like") or row["model"])
        figure = row["compute"].get("curve", row["compute"].get("flops"))
        assert curves.setdefault(key, figure) == figure
        assert sources[row["source"]]["url"].startswith("https://")


def test_a_row_with_its_own_constant_is_refused(tmp_path: Path) -> None:
    document = json.loads(TABLE.read_text())
    row = dict(document["rows"][0], step_overhead=0.01)
    assert any("step_overhead" in p for p in row_problems(row, document["sources"]))
    tuned = dict(document["rows"][0], compute={**document["rows"][0]["compute"],
                                               "fixed_s": 0.02})
    assert any("fixed_s" in p for p in row_problems(tuned, document["sources"]))
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({**document, "rows": [row]}))
    with pytest.raises(UsageError, match="step_overhead"):
        load_table(path)


def test_published_row_is_predicted_and_summarised(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    document = load_table()
    goyal = next(row for row in document["rows"] if row["id"].startswith("goyal"))
    found = predict_row(goyal)
    assert 0.5 < found.predicted <= 1.0 and found.perfect == 1.0
    assert found.perfect_error == pytest.approx(1 / 0.9 - 1)
    made = [PublishedRow({"metric": "speedup", "published": 10, "devices": 16}, 11.0),
            PublishedRow({"metric": "efficiency", "published": 0.8, "devices": 8}, 0.7)]
    numbers = summary(made)
    assert numbers["median_abs_error"] == pytest.approx((0.1 + 0.125) / 2)
    assert numbers["worst_abs_error"] == pytest.approx(0.125)
    assert numbers["perfect_mean_abs_error"] == pytest.approx((0.6 + 0.25) / 2)
    path = tmp_path / "one.json"
    path.write_text(json.dumps({**document, "rows": [goyal]}))
    assert main(["predict", "--validate-published", str(path)]) == 0
    out = capsys.readouterr().out
    assert "goyal2017-resnet50-256" in out and "perfect scaling" in out and "1 rows" in out


CPU_ROWS = ("dawnbench-intel-resnet50-128", "dawnbench-intel-resnet50-64to128",
            "surfsara-resnet50-448", "you2017-alexnet-1024", "you2017-resnet50-1600",
            "kurth2017-hep-9600")


def test_the_seeds_cpu_cluster_records_are_rows_with_their_sources() -> None:
    document = load_table()
    rows = {row["id"]: row for row in document["rows"]}
    for name in CPU_ROWS:
        row = rows[name]
        # node type, interconnect and the per-node rate each say where they come from
        assert row["node"] and row["interconnect"] and row["compute"]["where"], name
        assert document["sources"][row["compute"]["source"]]["url"].startswith("https://")
        if row["metric"] == "time_to_train_min":
            assert row["epochs"] > 0 and row["train_samples"] == 1_281_167, name


def test_a_time_to_train_row_is_its_epochs_at_the_predicted_rate() -> None:
    rows = {row["id"]: row for row in load_table()["rows"]}
    found = predict_row(rows["dawnbench-intel-resnet50-128"])
    # perfect scaling: 128 nodes at the per-node 73.0 images/s, 85 epochs of ImageNet-1k
    assert found.single_rate == pytest.approx(73.0)
    assert found.perfect == pytest.approx(85 * 1_281_167 / (128 * 73.0) / 60)
    # the model's communication makes it slower than perfect, never faster
    assert found.predicted > found.perfect
    kurth = predict_row(rows["kurth2017-hep-9600"])
    assert kurth.perfect == pytest.approx(9600 * 2e12 / 1e15, rel=1e-4)  # 2 TFLOP/s a node
    assert 0 < kurth.predicted < kurth.perfect


def test_a_time_row_without_its_epochs_or_with_two_rates_is_refused() -> None:
    document = load_table()
    row = next(r for r in document["rows"] if r["metric"] == "time_to_train_min")
    sources = document["sources"]
    assert any("epochs" in p for p in row_problems(
        {k: v for k, v in row.items() if k != "epochs"}, sources))
    both = dict(row, compute={**row["compute"], "flops": 1e12})
    assert any("curve or FLOP/s" in p for p in row_problems(both, sources))


def test_stated_ranges_are_sourced_hold_the_nominal_input_and_apply_where_named() -> None:
    document = load_table()
    sources, ranges = document["sources"], document["ranges"]
    for name, stated in ranges.items():
        assert range_problems(stated, sources) == [], name
    assert any("low <= 1 <= high" in p for p in range_problems(
        {"input": "compute", "low": 1.1, "high": 1.2, "source": "goyal2017"}, sources))
    assert any("links" in p for p in range_problems(
        {"input": "bandwidth", "low": 0.9, "high": 1.0, "source": "goyal2017"}, sources))
    rows = {row["id"]: row for row in document["rows"]}
    (p100,) = row_inputs(rows["horovod-vgg16-128"], ranges)
    # a rate x0.877 to x1 is a step time x1 to x1/0.877
    assert p100.target == "compute" and (p100.low, p100.high) == pytest.approx((1, 1 / 0.877))
    assert row_inputs(rows["goyal2017-resnet50-256"], ranges) == ()
    link = {"input": "bandwidth", "low": 0.5, "high": 1.0, "links": ["25gbe-tcp"],
            "source": "goyal2017"}
    (slow,) = row_inputs(rows["horovod-vgg16-16-tcp"] | {"ranges": []}, {"tcp": link})
    assert slow.target == "link:inter:beta" and (slow.low, slow.high) == (1.0, 2.0)
    # every row says what the model lacks for it: the note a miss is explained by
    assert all(row["lacks"] for row in document["rows"])
    for pair in document["pairs"]:
        a, b = (rows[name] for name in pair["rows"])
        assert a["strategy"] != b["strategy"] and a["devices"] == b["devices"]
        assert a["topology"] == b["topology"] and a["metric"] == b["metric"]


def test_a_ranged_row_is_priced_at_every_draw() -> None:
    document = load_table()
    row = next(r for r in document["rows"] if r["id"] == "horovod-vgg16-16-tcp")
    found = predict_row(row, row_inputs(row, document["ranges"]))
    assert found.interval is not None and len(found.draws) == DRAWS
    # a slower device hides more of the same allreduce: the speed-up can only rise
    assert found.predicted <= found.interval[0] <= found.interval[1] <= 16
    assert predict_row(row).interval is None
