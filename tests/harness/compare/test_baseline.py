"""compare's baseline from a store: the candidate's machine only, one commit or the latest
good result on a branch per experiment, the merge base through git."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from tests.harness.compare.test_compare import (
    make_record,
    scaled,
    steady_steps,
    verdict_line,
    write,
)


def at(record: dict[str, Any], commit: str, when: str, *, machine: str = "runner-a",
       branch: str = "main", status: str = "success", dirty: bool = False) -> dict[str, Any]:
    record["code"] = {"commit": commit, "branch": branch, "dirty": dirty, "ci_url": None}
    record["created_at"] = when
    record["machine"]["name"] = machine
    record["status"] = status
    return record


def run(seed: int, commit: str, when: str, factor: float = 1.0, **kwargs: Any) -> dict:
    base = make_record(f"{commit}-{seed}-{kwargs.get('machine', 'a')}", steady_steps(seed=seed))
    return at(scaled(base, base["run_id"], "step_time", factor), commit, when, **kwargs)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """main: an old slow commit, then a fast good one; a newer failed and a newer dirty one
    that are no baseline; another machine's newest records, 2x slower; a feature branch."""
    records = [
        *(run(s, "a" * 40, f"2026-11-01T00:0{s}", 1.3) for s in range(3)),
        *(run(s, "b" * 40, f"2026-11-02T00:0{s}") for s in range(3)),
        run(0, "c" * 40, "2026-11-03T00:00", 1.0, status="failed"),
        run(1, "d" * 40, "2026-11-04T00:00", 1.5, dirty=True),
        *(run(s, "e" * 40, f"2026-11-05T00:0{s}", 2.0, machine="runner-b") for s in range(3)),
        *(run(s, "f" * 40, f"2026-11-06T00:0{s}", 1.3, branch="feature") for s in range(3)),
    ]
    for record in records:
        write(tmp_path / "store" / f"{record['run_id']}.json", record)
    return tmp_path / "store"


@pytest.fixture
def candidate(tmp_path: Path) -> str:
    for seed in range(3):
        write(tmp_path / "cand" / f"c{seed}.json", run(10 + seed, "9" * 40, "2026-11-07"))
    return str(tmp_path / "cand")


def test_latest_good_result_on_the_branch_is_the_baseline(store: Path, candidate: str,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    assert main(["compare", str(store), candidate, "--baseline-branch", "main"]) == 0
    err = capsys.readouterr().err
    assert f"runner-a, latest on main: commit {'b' * 12} (3 records" in err


def test_a_commit_prefix_picks_that_commit_and_its_slower_code_passes(
        store: Path, candidate: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(store), candidate, "--baseline-commit", "aaaaaaa"]) == 0
    assert f"at commit {'a' * 12}" in capsys.readouterr().err


def test_the_feature_branch_baseline_is_faster_code_so_the_candidate_passes_or_regresses(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = tmp_path / "slow"
    for seed in range(3):
        write(slow / f"s{seed}.json", run(20 + seed, "9" * 40, "2026-11-07", 1.3))
    assert main(["compare", str(store), str(slow), "--baseline-branch", "main"]) == 1
    assert verdict_line(capsys.readouterr().out).startswith("regression: hep_cnn step time +")
    assert main(["compare", str(store), str(slow), "--baseline-branch", "feature"]) == 0


def test_a_whole_store_is_never_pooled_and_says_what_it_compares(
        store: Path, candidate: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a selector the baseline is the candidate's machine at its latest commit (the
    feature branch's three runs): the other machine and the older commits stay out."""
    report = tmp_path / "comparison.json"
    main(["compare", str(store), candidate, "--json", str(report)])
    err = capsys.readouterr().err
    assert "the baseline holds records of 2 machines (runner-a; runner-b)" in err
    assert "7 older record(s) of the same experiments (3 earlier commit(s)" in err
    rows = json.loads(report.read_text())["rows"]
    step = next(row for row in rows if row["metric"] == "step_time")
    assert (step["n_baseline"], step["level"]) == (3, "runs")
    assert step["ratio"] == pytest.approx(1 / 1.3, rel=0.05)  # runner-b's are 2x, b's 1x


def test_no_record_of_the_machine_or_commit_or_branch_is_exit_2(
        store: Path, tmp_path: Path, candidate: str, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    write(other / "x.json", run(30, "9" * 40, "2026-11-07", machine="runner-z"))
    assert main(["compare", str(store), str(other), "--baseline-branch", "main"]) == 2
    assert "no successful record of the candidate's machine (runner-z)" in \
        capsys.readouterr().err
    assert main(["compare", str(store), candidate, "--baseline-commit", "1234567"]) == 2
    assert "at commit 1234567" in capsys.readouterr().err
    assert main(["compare", str(store), candidate, "--baseline-branch", "nope"]) == 2
    assert "branches: feature, main" in capsys.readouterr().err
    assert main(["compare", str(store), candidate, "--baseline-commit", "xyz"]) == 2


def test_merge_base_comes_from_git(store: Path, candidate: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                               "user.email=t@t", *args], check=True, capture_output=True,
                              text=True).stdout.strip()
    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "base")
    base = git("rev-parse", "HEAD")
    git("checkout", "-q", "-b", "topic")
    git("commit", "-q", "--allow-empty", "-m", "change")
    for path in store.glob("b*.json"):
        path.write_text(path.read_text().replace("b" * 40, base))
    monkeypatch.chdir(repo)
    assert main(["compare", str(store), candidate, "--baseline-merge-base", "main"]) == 0
    assert f"at commit {base[:12]}" in capsys.readouterr().err
    assert main(["compare", str(store), candidate, "--baseline-merge-base", "no-such"]) == 2
    assert "--baseline-merge-base no-such" in capsys.readouterr().err


def history(tmp_path: Path, factors: list[float]) -> Path:
    """runner-a's main: a run per commit whose code is the same, slower or faster by
    `factors` (what the machine did to them), oldest first."""
    for i, factor in enumerate(factors):
        commit = f"{i:x}" * 40
        record = run(i, commit, f"2026-11-0{1 + i // 10}T00:{i % 10}0")
        record = scaled(scaled(record, record["run_id"], "step_time", factor),
                        record["run_id"], "throughput", 1 / factor)
        write(tmp_path / "store" / f"{record['run_id']}.json", record)
    return tmp_path / "store"


@pytest.mark.parametrize("factors, code", [
    ([1.0, 1.12, 0.92, 1.08, 0.9, 1.1, 0.95, 1.05], 0),  # reruns vary ~10%: 12% is noise
    ([1.0, 1.003, 0.998, 1.002, 0.997, 1.001, 0.999, 1.0], 1),  # quiet: 12% is a regression
])
def test_the_machines_history_sets_what_counts_as_a_change(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], factors: list[float],
        code: int) -> None:
    store = history(tmp_path, factors)
    slow = tmp_path / "slow"
    for seed in range(3):
        record = run(20 + seed, "9" * 40, "2026-11-07", 1.12)
        write(slow / f"s{seed}.json", scaled(record, record["run_id"], "throughput", 1 / 1.12))
    assert main(["compare", str(store), str(slow), "--baseline-branch", "main",
                 "--json", str(tmp_path / "c.json")]) == code
    captured = capsys.readouterr()
    assert "run-to-run noise from the machine's history: 1 experiment(s)" in captured.err
    import json

    row = next(r for r in json.loads((tmp_path / "c.json").read_text())["rows"]
               if r["metric"] == "throughput")
    assert row["verdict"] == ("below resolution" if code == 0 else "regression")
    assert (row["resolution_pct"] > 12) == (code == 0)


def test_the_history_noise_is_between_commits_not_between_a_commits_repeats(
        tmp_path: Path) -> None:
    """Each commit's three repeats agree within 0.2% while the commits of unchanged code fall
    ~10% apart (the machine drifts between invocations): the floor is the commits' noise."""
    from harness.compare.baseline import history_noise

    factors = [1.0, 1.12, 0.92, 1.08, 0.9, 1.1, 0.95, 1.05]
    records = []
    for i, factor in enumerate(factors):
        for repeat, jitter in enumerate((1.0, 1.002, 0.998)):
            record = run(10 * i + repeat, f"{i:x}" * 40, f"2026-11-01T0{i}:0{repeat}")
            records.append(scaled(record, record["run_id"], "throughput", factor * jitter))
    (noise,) = history_noise(records).values()
    # consecutive commits' medians differ by 9-20% in log terms: far beyond the repeats' 0.2%
    assert noise["throughput"] > 20
    # one record per commit, or three: the same commits' medians give the same floor
    singles = [r for r in records if r["run_id"].split("-")[1].endswith("0")]
    assert len(singles) == len(factors)
    assert history_noise(singles)[next(iter(history_noise(singles)))]["throughput"] == \
        pytest.approx(noise["throughput"], rel=1e-3)


def test_a_value_metric_in_two_modes_floors_at_the_range_its_single_runs_reached() -> None:
    """Peak memory landing at 605 or 645 MB run by run (alexnet on Zen 4): most commits'
    medians of three agree, so their differences alone say ~0%, yet the next commit's median
    can take the other mode; the floor is at least the range single runs reached."""
    from harness.compare.baseline import history_noise

    modes = [(605, 605, 645), (605, 645, 605), (645, 605, 605), (605, 605, 605),
             (645, 645, 605), (605, 605, 645)]
    records = []
    for i, values in enumerate(modes):
        for repeat, megabytes in enumerate(values):
            record = run(10 * i + repeat, f"{i:x}" * 40, f"2026-11-01T0{i}:0{repeat}")
            record["metrics"].append({"name": "peak_memory", "unit": "bytes",
                                      "value": megabytes * 1e6, "higher_is_better": False})
            records.append(record)
    (noise,) = history_noise(records).values()
    assert noise["peak_memory"] >= (645 / 605 - 1) * 100
    assert noise["throughput"] < 2  # a metric of many samples keeps the commits' noise


def test_the_floors_widen_to_one_band_for_the_whole_comparison() -> None:
    """m gated metrics, each at its own 95% floor, would alarm in ~1 - 0.95^m of same-commit
    comparisons: each floor becomes the 1 - 0.05/m band of the same log-normal spread."""
    import math
    from statistics import NormalDist

    from harness.compare.rows import family_floors

    noise = {"k": {"throughput": 5.0, "peak_memory": 8.0}, "other": {"throughput": 3.0}}
    assert family_floors(noise, 1) == noise  # one gated metric: its own 95% band
    widened = family_floors(noise, 3)
    factor = NormalDist().inv_cdf(1 - 0.05 / 6) / NormalDist().inv_cdf(0.975)
    assert widened["k"]["throughput"] == pytest.approx((1.05 ** factor - 1) * 100)
    assert widened["k"]["peak_memory"] == pytest.approx((math.exp(factor * math.log(1.08))
                                                         - 1) * 100)
    assert widened["k"]["throughput"] > 5.0 * 1.2  # three gated metrics: z 2.39 for 1.96


def test_the_family_is_the_gated_metrics_tested_against_the_history(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare counts as the family only rows that are tested, gated and have a floor: a
    diagnostic (phases) or a metric without samples (first_step_time) widens nothing."""
    from harness.compare import rows as rows_module

    seen: list[int] = []
    real = rows_module.family_floors
    monkeypatch.setattr(rows_module, "family_floors",
                        lambda noise, family: seen.append(family) or real(noise, family))
    records = [run(i, f"{i:x}" * 40, f"2026-11-01T0{i}:00") for i in range(6)]
    from harness.compare.baseline import history_noise

    noise = history_noise(records[:5])
    (floors,) = noise.values()
    assert {"throughput", "step_time"} <= set(floors)
    rows_module.compare_records(records[:5], [records[5]], 5.0, noise=noise)
    tested = {"throughput", "step_time"}  # the records' gated metrics with samples
    assert seen == [len(tested)]
