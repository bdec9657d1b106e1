"""``digideep runs export`` and ``digideep report --from``: runs that travel as files give the same report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from digideep.main import cli
from digideep.report import export as export_module
from digideep.report.build import build_report
from digideep.report.export import Export, describe_exports, read_export
from digideep.report.records import Criteria, read_store
from digideep.report.references import load_references
from digideep.report.selection import select_records
from tests.report.runs import linear_curve, make_benchmark

SAC, TD3 = "params.pendulum_sac", "params.pendulum_td3"
FINAL = {
    (SAC, "Pendulum-v1"): -200.0,
    (TD3, "Pendulum-v1"): -140.0,
    (SAC, "Hopper-v5"): 1000.0,
    (TD3, "Hopper-v5"): 800.0,
}
CELLS = [(a, e, s) for (a, e) in FINAL for s in range(3)]
BUDGET = 20000


def _export(uri: str, out: Path, *selection: str) -> int:
    return cli(["runs", "export", "--tracking-uri", uri, "--out", str(out), *selection])


def _report(out: Path, *args: str) -> int:
    return cli(["report", "--out", str(out), "--reps", "200", "--compare", TD3, SAC, *args])


def _resumed(client: MlflowClient, name: str, algorithm: str, env: str, seed: int, value: float) -> None:
    """Log the last evaluation of a cell again, later, as a resumed run does (the later point counts),
    and count the resume in the run's tag."""
    found = client.search_runs(
        [client.get_experiment_by_name(f"exp-{name}").experiment_id],
        filter_string=f"tags.algorithm = '{algorithm}' and tags.env = '{env}' and tags.seed = '{seed}'",
    )
    client.log_batch(found[0].info.run_id, metrics=[Metric("eval/return", value, 10, BUDGET)])
    client.set_tag(found[0].info.run_id, "digideep.resumes", "1")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One benchmark in three real stores: ``all`` holds every cell, ``a`` and ``b`` split them."""
    root = tmp_path_factory.mktemp("stores")
    uris = {key: f"sqlite:///{root / key}.db" for key in ("all", "a", "b")}
    split = {"all": CELLS, "a": [c for c in CELLS if c[2] < 2], "b": [c for c in CELLS if c[2] == 2]}
    for key, uri in uris.items():
        client = MlflowClient(uri)
        make_benchmark(
            client, split[key], linear_curve(FINAL), 5000, BUDGET, name="travel", artifacts=root / key
        )
        if key in ("all", "b"):
            _resumed(client, "travel", SAC, "Hopper-v5", 2, 1234.5)
        if key in ("all", "a"):  # in flight: left out, and counted so, wherever it is read
            experiment = client.get_experiment_by_name("exp-travel").experiment_id
            tags = {"digideep.benchmark": "travel", "algorithm": SAC, "env": "Hopper-v5", "seed": "3"}
            client.create_run(experiment, tags=tags)
    return uris


def test_a_report_from_an_export_is_the_report_from_its_store(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "exports" / "all"
    assert _export(stores["all"], folder, "--benchmark", "travel") == 0
    assert capsys.readouterr().out == f"wrote 13 runs of benchmark travel to {folder}\n"
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "runs"]
    assert [p.name for p in (tmp_path / "exports").iterdir()] == ["all"]  # no partial sibling left
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "digideep-runs-export" and manifest["version"] == 1
    assert manifest["selection"] == "benchmark travel" and manifest["store"] == stores["all"]
    assert len(manifest["runs"]) == 13 == len(list((folder / "runs").iterdir()))

    assert _report(tmp_path / "from-store", "--tracking-uri", stores["all"], "--benchmark", "travel") == 0
    from_store = capsys.readouterr().out
    assert _report(tmp_path / "from-folder", "--from", str(folder)) == 0
    from_folder = capsys.readouterr().out
    table = (tmp_path / "from-store" / "table.txt").read_text()
    assert "13 runs" not in table and "12 runs (1 not finished, left out)" in table
    assert "1234.5" in table  # the resumed run's later point
    (hopper_sac,) = [line for line in table.splitlines() if line.split()[:2] == ["Hopper-v5", SAC]]
    assert "0: 0, 1: 0, 2: 1" in hopper_sac  # resumes, by seed: the export carries the tag
    assert (tmp_path / "from-folder" / "table.txt").read_text() == table
    assert from_folder.startswith(table) and from_store.startswith(table)
    assert "logged 6 files" in from_store and "logged" not in from_folder  # no store, no parent run

    # the same numbers to the last bit, not only as printed
    client = MlflowClient(stores["all"])
    criteria = Criteria(benchmark="travel")
    references = load_references()
    reports = [
        build_report(select_records(records, "benchmark travel", ["x"]), references, 1, 200, 0, (TD3, SAC))
        for records in (read_store(client, criteria), read_export(folder).records)
    ]
    assert reports[0].rows == reports[1].rows
    assert (
        reports[0].aggregates == reports[1].aggregates and reports[0].improvements == reports[1].improvements
    )


def test_exports_of_split_cells_combine_into_the_report_of_one_store(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    exports = tmp_path / "exports"  # a folder that collects exports: one per machine
    for key in ("a", "b"):
        assert _export(stores[key], exports / key, "--benchmark", "travel") == 0
    assert _report(tmp_path / "one-store", "--tracking-uri", stores["all"], "--benchmark", "travel") == 0
    assert _report(tmp_path / "two-folders", "--from", str(exports / "a"), "--from", str(exports / "b")) == 0
    assert _report(tmp_path / "collected", "--from", str(exports)) == 0
    beside = [
        "--from",
        str(exports / "a"),
        "--with-store",
        "--tracking-uri",
        stores["b"],
        "--benchmark",
        "travel",
    ]
    assert _report(tmp_path / "folder-and-store", *beside) == 0
    capsys.readouterr()
    table = (tmp_path / "one-store" / "table.txt").read_text()
    assert (tmp_path / "two-folders" / "table.txt").read_text() == table
    assert (tmp_path / "collected" / "table.txt").read_text() == table
    assert (tmp_path / "folder-and-store" / "table.txt").read_text() == table


def test_a_tag_key_given_twice_reads_runs_with_either_value(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    either = ("--tag", "env=Hopper-v5", "--tag", "env=Pendulum-v1")
    assert _report(tmp_path / "every-env", "--tracking-uri", stores["all"], "--benchmark", "travel") == 0
    assert (
        _report(tmp_path / "either", "--tracking-uri", stores["all"], "--benchmark", "travel", *either) == 0
    )
    assert _export(stores["all"], tmp_path / "exported", "--benchmark", "travel", *either) == 0
    assert _report(tmp_path / "either-from-export", "--from", str(tmp_path / "exported"), *either) == 0
    assert _report(tmp_path / "hopper", "--tracking-uri", stores["all"], "--tag", "env=Hopper-v5") == 0
    capsys.readouterr()

    def table(name: str) -> list[str]:
        return (tmp_path / name / "table.txt").read_text().splitlines()

    said = (
        "report of benchmark travel, tag env=Hopper-v5 or env=Pendulum-v1: 12 runs (1 not finished, left out)"
    )
    assert table("either")[0].startswith(said)
    assert table("either")[1:] == table("every-env")[1:]
    assert table("either-from-export")[1:] == table("either")[1:]
    rows = [line.split()[0] for line in table("hopper") if line.startswith(("Hopper-v5", "Pendulum-v1"))]
    assert rows == ["Hopper-v5", "Hopper-v5"]  # one value: that environment only
    criteria = Criteria("travel", tags=("env=Hopper-v5", "seed=2", "env=Pendulum-v1", "env=Hopper-v5"))
    assert criteria.wanted()[1:] == [("env", ("Hopper-v5", "Pendulum-v1")), ("seed", ("2",))]
    assert criteria.matches_tags({"digideep.benchmark": "travel", "env": "Pendulum-v1", "seed": "2"})
    assert not criteria.matches_tags({"digideep.benchmark": "travel", "env": "Ant-v5", "seed": "2"})
    assert not criteria.matches_tags({"digideep.benchmark": "other", "env": "Hopper-v5", "seed": "2"})


def test_the_selections_of_several_exports_are_said_once_and_together() -> None:
    def said(*descriptions: str) -> str:
        return describe_exports([Export(Path("x"), text, []) for text in descriptions])

    finished = ("benchmark a, finished runs only", "benchmark b-2, finished runs only")
    assert said(*finished, finished[0]) == "benchmarks a, b-2 (finished runs only)"
    assert said("benchmark a", "benchmark b") == "benchmarks a, b"
    assert said("benchmark a, tag env=H", "benchmark b, tag env=H") == "benchmarks a, b (tag env=H)"
    assert said("benchmark a", "benchmark a") == "benchmark a"
    assert said("benchmark a", finished[1]) == "benchmark a and benchmark b-2, finished runs only"
    assert said("experiment e, benchmark a", "benchmark b") == "experiment e, benchmark a and benchmark b"


def test_an_export_of_finished_runs_leaves_the_run_in_flight_out(
    stores: dict[str, str], tmp_path: Path
) -> None:
    assert _export(stores["a"], tmp_path / "every", "--benchmark", "travel") == 0
    assert _export(stores["a"], tmp_path / "finished", "--benchmark", "travel", "--finished") == 0

    def statuses(folder: Path) -> list[str]:
        return sorted(json.loads(path.read_text())["status"] for path in (folder / "runs").glob("*.json"))

    every = statuses(tmp_path / "every")
    assert every.count("RUNNING") == 1  # store a's seed 3 of SAC on Hopper, in flight
    assert statuses(tmp_path / "finished") == [s for s in every if s == "FINISHED"]
    manifest = json.loads((tmp_path / "finished" / "manifest.json").read_text())
    assert manifest["selection"] == "benchmark travel, finished runs only"


def test_a_run_read_twice_counts_once_and_two_runs_of_one_cell_are_refused(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for key in ("all", "b"):
        assert _export(stores[key], tmp_path / key, "--benchmark", "travel") == 0
    capsys.readouterr()
    twice = [
        "--from",
        str(tmp_path / "b"),
        "--with-store",
        "--tracking-uri",
        stores["b"],
        "--benchmark",
        "travel",
    ]
    assert _export(stores["a"], tmp_path / "a", "--benchmark", "travel") == 0
    assert _report(tmp_path / "twice", "--from", str(tmp_path / "a"), *twice) == 0
    printed = capsys.readouterr().out
    assert f"4 runs read from both {stores['b']} and {tmp_path / 'b'}, each counted once: " in printed
    assert (tmp_path / "twice" / "table.txt").read_text().count("counted once") == 1

    assert _report(tmp_path / "refused", "--from", str(tmp_path / "all"), "--from", str(tmp_path / "b")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and " seed 2 has 2 finished runs (" in err
    assert f"in {tmp_path / 'all'}, " in err and f"in {tmp_path / 'b'})" in err
    assert not (tmp_path / "refused").exists()


def _damage(folder: Path, case: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    if case in ("interrupted", "collected, one interrupted"):
        (folder / "manifest.json").unlink()
    elif case == "version":
        (folder / "manifest.json").write_text(json.dumps({**manifest, "version": 2}))
    elif case == "format":
        (folder / "manifest.json").write_text(json.dumps({**manifest, "format": "mlflow"}))
    elif case == "missing run":
        (folder / manifest["runs"][0]).unlink()
    elif case == "damaged run":
        (folder / manifest["runs"][0]).write_text('{"run_id": "x"}')
    elif case == "edited run":
        path = folder / manifest["runs"][0]
        run = json.loads(path.read_text())
        run["tags"]["algorithm"] = "params.edited"
        path.write_text(json.dumps(run))


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("interrupted", "has no manifest.json: it is not a complete 'digideep runs export' folder"),
        ("version", "is export format version 2; this digideep reads version 1"),
        ("format", "manifest.json is not the manifest of a 'digideep runs export' folder"),
        ("missing run", "cannot be read"),
        ("damaged run", "is damaged (KeyError"),
        ("edited run", "differs between"),
        ("twice", "is given twice; name each export folder once"),
        (
            "collected, one interrupted",
            "holds run files but no manifest.json, so it is not a complete export",
        ),
        ("no folder", "no such folder"),
        ("store only", "--with-store adds the store's runs to those of --from FOLDER; name a folder"),
    ],
)
def test_a_bad_export_folder_is_refused_in_one_line(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture, case: str, message: str
) -> None:
    folder = tmp_path / "export"
    assert _export(stores["a"], folder, "--benchmark", "travel") == 0
    args = ["--from", str(folder)]
    if case == "edited run":  # the same run, from its store and from an export edited since
        shutil.copytree(folder, tmp_path / "copy")
        args += ["--from", str(tmp_path / "copy")]
    elif case == "twice":
        args += ["--from", f"{tmp_path}/./export"]
    elif case == "collected, one interrupted":  # a folder of exports, one of them cut short
        shutil.copytree(folder, tmp_path / "complete")
        args = ["--from", str(tmp_path)]
    elif case == "no folder":
        args = ["--from", str(tmp_path / "elsewhere")]
    elif case == "store only":
        args = ["--with-store", "--tracking-uri", stores["a"], "--benchmark", "travel"]
    _damage(folder, case)
    capsys.readouterr()
    assert _report(tmp_path / "out", *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("digideep: error: ") and message in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("not empty", "exists and is not empty; name a new folder"),
        ("no runs", "no finished runs match benchmark nope at sqlite:///"),
        ("no selection", "choose the runs to report with --benchmark NAME"),
        ("mixed protocol", "the runs mix eval/frame_budget"),
    ],
)
def test_a_bad_export_is_refused_in_one_line_and_writes_nothing(
    stores: dict[str, str],
    mlflow_uri: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    case: str,
    message: str,
) -> None:
    out = tmp_path / "exports" / "out"
    selection = ["--benchmark", "travel"]
    uri = stores["all"]
    if case == "not empty":
        out.mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
    elif case == "no runs":
        selection = ["--benchmark", "nope"]
    elif case == "no selection":
        selection = []
    elif case == "mixed protocol":
        uri = mlflow_uri
        mixed = {(SAC, "Pendulum-v1", 1): {"eval/frame_budget": "4000"}}
        name, _ = make_benchmark(
            MlflowClient(uri),
            CELLS[:3],
            linear_curve(FINAL),
            protocol=mixed,
            artifacts=tmp_path / "artifacts",
        )
        selection = ["--benchmark", name]
    capsys.readouterr()  # MLflow's lines as it makes a new store
    assert _export(uri, out, *selection) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("digideep: error: ") and message in err
    if case == "not empty":
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
    else:
        assert not (tmp_path / "exports").exists() or not any((tmp_path / "exports").iterdir())


def test_an_interrupted_export_leaves_no_folder(
    stores: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = []
    real = export_module._write_text

    def interrupted(path: Path, value: object) -> None:  # Ctrl-C after the second run file
        if len(written) == 2:
            raise KeyboardInterrupt
        written.append(path)
        real(path, value)

    monkeypatch.setattr(export_module, "_write_text", interrupted)
    out = tmp_path / "exports" / "out"
    with pytest.raises(KeyboardInterrupt):
        export_module.export_runs(MlflowClient(stores["all"]), Criteria(benchmark="travel"), out)
    assert len(written) == 2 and list((tmp_path / "exports").iterdir()) == []
