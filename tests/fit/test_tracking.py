"""`pdsl fit --track`: the per-epoch history in TensorBoard event files and in an MLflow run."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pdsl.cli.main import main

MODELS = Path(__file__).resolve().parents[2] / "models"
SPRING = str(MODELS / "spring_pendulum.phm")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("track") / "data.csv"
    assert main(["simulate", SPRING, "--param", "m1=1.3", "--param", "m2=0.7", "--random-init", "4",
                 "--random-scale", "0.5", "--seed", "1", "--t-end", "1", "--dt", "0.05", "--rtol", "1e-10",
                 "-o", str(path)]) == 0
    return path


def _history(out: Path) -> list[list[float]]:
    from pdsl.data.csvio import read_table

    return read_table(out / "history.csv").data.tolist()


def _events(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Scalars of TensorBoard event files (TFRecord framing, Event protos), read without TensorBoard."""
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(logdir.glob("events.out.tfevents.*")):
        raw = f.read_bytes()
        pos = 0
        while pos < len(raw):
            (n,) = struct.unpack("<Q", raw[pos:pos + 8])
            ev = Event.FromString(raw[pos + 12:pos + 12 + n])
            pos += 12 + n + 4
            for v in ev.summary.value:
                if v.HasField("simple_value"):
                    out.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return out


def test_tensorboard(tmp_path, data, capsys):
    pytest.importorskip("tensorboardX")
    out, tb = tmp_path / "fit", tmp_path / "tb"
    assert main(["fit", SPRING, "--data", str(data), "--free", "m1,m2", "--epochs", "5", "-o", str(out), "--quiet",
                 "--track", f"tensorboard:{tb}"]) == 0
    assert "history of" in capsys.readouterr().out
    scalars = _events(tb)
    hist = _history(out)
    train = scalars["loss/train"]
    assert [s for s, _ in train] == [int(r[0]) for r in hist]
    assert [v for _, v in train] == pytest.approx([r[1] for r in hist], rel=1e-6)  # float32 in the events
    assert scalars["fit.m1"][-1][1] == pytest.approx(1.3, rel=2e-3)


def test_mlflow(tmp_path, data, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    out = tmp_path / "fit"
    assert main(["fit", SPRING, "--data", str(data), "--free", "m1,m2", "--epochs", "5", "-o", str(out), "--quiet",
                 "--track", f"mlflow:{uri}"]) == 0
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    (exp,) = [e for e in client.search_experiments()]
    (run,) = client.search_runs([exp.experiment_id])
    hist = _history(out)
    metric = sorted(client.get_metric_history(run.info.run_id, "loss_train"), key=lambda m: m.step)
    assert [m.step for m in metric] == [int(r[0]) for r in hist]
    assert [m.value for m in metric] == pytest.approx([r[1] for r in hist], rel=1e-12)
    assert run.data.params["free"] == "['m1', 'm2']"  # the settings are the run's parameters


def test_bad_tracker_fails_before_the_fit(tmp_path, data, capsys):
    out = tmp_path / "fit"
    code = main(["fit", SPRING, "--data", str(data), "--free", "m1", "-o", str(out), "--track", "wandb"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown tracker" in err and not out.exists()
    code = main(["fit", SPRING, "--data", str(data), "--free", "m1", "-o", str(out), "--track", "tensorboard"])
    assert code == 2 and "needs a directory" in capsys.readouterr().err and not out.exists()
