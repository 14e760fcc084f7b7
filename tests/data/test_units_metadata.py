"""Units live in metadata, not in column names (issue 34): every format round-trips from `simulate -o` into
`fit --data` and `evaluate`; the standard readers (pandas, pyarrow, h5py, xarray, scipy) see the columns and
units; data in other units of the same dimension are converted with pint (mm -> m, deg -> rad), never taken
silently as the model's unit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data import units as U
from pdsl.data.csvio import read_table, write_table
from pdsl.diagnostics import PdslError

MODELS = Path(__file__).resolve().parents[2] / "models"
PENDULUM = MODELS / "step_pendulum.phm"  # units on every declaration; der(theta) in rad/s (a `/` for HDF5)
UNITS = {"t": "s", "theta": "rad", "der(theta)": "rad/s", "x": "m", "y": "m", "tau_smooth": "N*m"}
FORMATS = [".csv", ".parquet", ".h5", ".mat"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`pdsl simulate -o run.EXT` of the pendulum with units, in every format."""
    d = tmp_path_factory.mktemp("runs")
    for suffix in FORMATS:
        assert main(["simulate", str(PENDULUM), "--t-end", "2", "--dt", "0.05", "-o", str(d / f"run{suffix}")]) == 0
    return d


@pytest.mark.parametrize("suffix", FORMATS)
def test_simulate_writes_bare_names_and_units_as_metadata(runs, suffix):
    table = read_table(runs / f"run{suffix}")
    assert table.columns == tuple(UNITS)  # named as `show` names them: no ` [rad]`
    assert dict(zip(table.columns, table.units)) == UNITS
    csv = read_table(runs / "run.csv")
    np.testing.assert_array_equal(table.data, csv.data)  # every bit, every format


def test_the_csv_sidecar(runs):
    assert (runs / "run.csv").read_text().splitlines()[0] == "t,theta,der(theta),x,y,tau_smooth"
    assert (runs / "run.units.csv").read_text().splitlines() == ["column,unit", *(f"{k},{v}" for k, v in UNITS.items())]


@pytest.mark.parametrize("suffix", FORMATS)
def test_every_format_fits_and_evaluates(runs, suffix, tmp_path, capsys):
    """fit --data and evaluate --data read every format; the fit is the same as from the CSV."""
    results = {}
    for s in dict.fromkeys([".csv", suffix]):
        out = tmp_path / f"fit{s}"
        assert main(["fit", str(PENDULUM), "--data", str(runs / f"run{s}"), "--free", "c", "--param", "c=0.1",
                     "-o", str(out), "--quiet"]) == 0
        results[s] = json.loads((out / "params.json").read_text())["values"]["c"]
        assert main(["evaluate", str(PENDULUM), "--data", str(runs / f"run{s}"), "--params",
                     str(out / "params.json")]) == 0
    assert abs(results[".csv"] - 0.05) < 5e-3  # the data were simulated with c = 0.05
    assert results[suffix] == results[".csv"]
    assert "unknown column" not in capsys.readouterr().err


def test_hdf5_with_slash_in_units_and_names_in_order(runs):
    h5py = pytest.importorskip("h5py")
    with h5py.File(runs / "run.h5", "r") as f:
        assert list(f.keys()) == list(UNITS)  # creation order is tracked
        assert f["der(theta)"].attrs["units"] == "rad/s"
        assert "units" in f["t"].attrs and f["t"].attrs["units"] == "s"


def test_parquet_field_metadata_and_pandas(runs):
    pq = pytest.importorskip("pyarrow.parquet")
    pd = pytest.importorskip("pandas")
    schema = pq.read_schema(runs / "run.parquet")
    assert {f.name: f.metadata[b"unit"].decode() for f in schema} == UNITS
    df = pd.read_parquet(runs / "run.parquet")
    assert list(df.columns) == list(UNITS)
    np.testing.assert_array_equal(df.to_numpy(), read_table(runs / "run.csv").data)


def test_hdf5_reads_in_xarray_with_units(runs):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf", reason="xarray reads HDF5 through h5netcdf (pip install h5netcdf)")
    with xr.open_dataset(runs / "run.h5", engine="h5netcdf") as ds:
        assert list(ds.coords) == ["t"] and list(ds.data_vars) == [c for c in UNITS if c != "t"]
        assert {n: ds[n].attrs["units"] for n in UNITS} == UNITS
        df = ds.to_dataframe().reset_index()
    np.testing.assert_array_equal(df[list(UNITS)].to_numpy(), read_table(runs / "run.csv").data)


def test_hdf5_of_several_trajectories_reads_in_xarray(tmp_path):
    """With a traj column (t repeats), the dimension is `row`, without values; pdsl reads the file back."""
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    data = np.column_stack([np.repeat([0.0, 1.0], 3), np.tile([0.0, 0.1, 0.2], 2), np.arange(6.0)])
    write_table(tmp_path / "r.h5", ["traj", "t", "x"], data, {"t": "s", "x": "m"})
    with xr.open_dataset(tmp_path / "r.h5", engine="h5netcdf") as ds:
        assert dict(ds.sizes) == {"row": 6} and ds["x"].attrs["units"] == "m"
        np.testing.assert_array_equal(ds["t"].values, data[:, 1])
    table = read_table(tmp_path / "r.h5")
    assert table.columns == ("traj", "t", "x") and table.units == (None, "s", "m")
    np.testing.assert_array_equal(table.data, data)


def test_a_file_xarray_wrote_is_read_with_its_units(tmp_path):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    t = np.linspace(0, 1, 5)
    ds = xr.Dataset({"theta": ("t", np.sin(t), {"units": "rad"})}, coords={"t": ("t", t, {"units": "s"})})
    ds.to_netcdf(tmp_path / "x.h5", engine="h5netcdf")
    table = read_table(tmp_path / "x.h5")
    assert dict(zip(table.columns, table.units)) == {"t": "s", "theta": "rad"}
    np.testing.assert_array_equal(table.column("theta"), np.sin(t))


def test_mat_reads_into_pandas(runs):
    pd = pytest.importorskip("pandas")
    from scipy.io import loadmat

    m = loadmat(runs / "run.mat", simplify_cells=True)
    df = pd.DataFrame(m["data"], columns=m["columns"])
    assert list(df.columns) == list(UNITS) and list(m["units"]) == list(UNITS.values())
    np.testing.assert_array_equal(df.to_numpy(), read_table(runs / "run.csv").data)


# ---------------------------------------------------------------- the API
def test_api_to_xarray_pandas_and_csv(tmp_path):
    import pdsl

    m = pdsl.load(PENDULUM)
    run = m.simulate(1.0, 0.1)
    assert run.columns[:3] == ["t", "theta", "der(theta)"] and run.units == UNITS
    pytest.importorskip("pandas")
    df = run.to_pandas()
    assert df.attrs["units"] == UNITS
    run.to_csv(tmp_path / "r.csv")
    assert read_table(tmp_path / "r.csv").units == tuple(UNITS.values())
    xr = pytest.importorskip("xarray")
    ds = run.to_xarray()
    assert isinstance(ds, xr.Dataset) and ds["der(theta)"].attrs["units"] == "rad/s" and ds["t"].attrs["units"] == "s"
    np.testing.assert_array_equal(ds["theta"].values, run["theta"])


def test_api_to_xarray_without_xarray(monkeypatch):
    import sys

    import pdsl

    run = pdsl.load(PENDULUM).simulate(0.2, 0.1)
    monkeypatch.setitem(sys.modules, "xarray", None)
    with pytest.raises(PdslError) as err:
        run.to_xarray()
    assert err.value.diagnostics[0].code == "MissingDependency"


# ---------------------------------------------------------------- conversion
def _in_other_units(runs, path: Path):
    """The pendulum's data with t in ms, theta in deg, der(theta) in deg/ms and x in mm (factors by hand)."""
    ref = read_table(runs / "run.csv")
    data = ref.data.copy()
    cols = list(ref.columns)
    factor = {"t": 1000.0, "theta": 180 / math.pi, "der(theta)": 180 / math.pi / 1000, "x": 1000.0}
    for name, f in factor.items():
        data[:, cols.index(name)] *= f
    write_table(path, cols, data, {**UNITS, "t": "ms", "theta": "deg", "der(theta)": "deg/ms", "x": "mm"})
    return ref


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_data_in_other_units_are_converted_with_pint(runs, tmp_path, suffix):
    pytest.importorskip("pint")
    from pdsl.fit.data import load_dataset
    from pdsl.pipeline import compile_model

    num = compile_model(PENDULUM).numeric
    _in_other_units(runs, tmp_path / f"mm{suffix}")
    got, ref = load_dataset(tmp_path / f"mm{suffix}", num), load_dataset(runs / "run.csv", num)
    (a,), (b,) = got.trajectories, ref.trajectories
    np.testing.assert_allclose(a.t, b.t, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(a.S, b.S, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(a.Y, b.Y, rtol=1e-14, atol=1e-15)
    assert got.dt == pytest.approx(ref.dt, rel=1e-12)


def test_fit_of_data_in_mm_and_degrees(runs, tmp_path):
    """The CLI fit of converted data finds what the fit of the data in the model's units finds."""
    pytest.importorskip("pint")
    _in_other_units(runs, tmp_path / "mm.csv")
    found = {}
    for name, data in (("mm", tmp_path / "mm.csv"), ("si", runs / "run.csv")):
        assert main(["fit", str(PENDULUM), "--data", str(data), "--free", "c", "--param", "c=0.1", "-o",
                     str(tmp_path / name), "--quiet"]) == 0
        found[name] = json.loads((tmp_path / name / "params.json").read_text())["values"]["c"]
    assert found["mm"] == pytest.approx(found["si"], rel=1e-8)


def test_without_pint_other_units_are_refused_at_the_sidecar(runs, tmp_path, monkeypatch):
    from pdsl.fit.data import load_dataset
    from pdsl.pipeline import compile_model

    monkeypatch.setattr(U, "_pint", lambda: None)
    _in_other_units(runs, tmp_path / "mm.csv")
    with pytest.raises(PdslError) as err:
        load_dataset(tmp_path / "mm.csv", compile_model(PENDULUM).numeric)
    d = err.value.diagnostics[0]
    assert d.code == "BadTrajectoryData" and d.span.path.endswith("mm.units.csv") and d.span.line == 2
    assert "`ms` differs from the model's `s`" in d.message and "pdsl[units]" in d.hint


def test_without_pint_another_spelling_of_the_same_unit_is_taken(tmp_path, monkeypatch):
    monkeypatch.setattr(U, "_pint", lambda: None)
    assert U.conversion_factor("N m", "N*m") == 1.0 and U.conversion_factor("m/s2", "m/s^2") == 1.0
    with pytest.raises(ValueError, match="needs pint"):
        U.conversion_factor("mm", "m")


@pytest.mark.parametrize("unit, target, factor", [
    ("mm", "m", 1e-3), ("deg", "rad", math.pi / 180), ("km/h", "m/s", 1 / 3.6), ("rpm", "rad/s", 2 * math.pi / 60),
    ("kg·m²/s²", "J", 1.0), ("N.m", "J", 1.0), ("µs", "s", 1e-6), ("g", "kg", 1e-3), ("min", "s", 60.0),
    ("s⁻¹", "Hz", 1.0), ("Ohm", "V/A", 1.0), ("mA", "A", 1e-3), ("L", "m^3", 1e-3), ("m*s^-2", "m/s^2", 1.0),
])
def test_conversion_factors(unit, target, factor):
    pytest.importorskip("pint")
    assert U.conversion_factor(unit, target) == pytest.approx(factor, rel=1e-14)


@pytest.mark.parametrize("unit, fragment", [("m", "different dimension"), ("furlong", "not a unit pdsl reads")])
def test_other_dimensions_and_unknown_units_are_refused(unit, fragment):
    with pytest.raises(ValueError, match=fragment):
        U.conversion_factor(unit, "rad")


def test_input_data_in_kilonewtons(tmp_path):
    """--input-data converts too: a force in kN gives the run of the same force in N."""
    pytest.importorskip("pint")
    model = tmp_path / "m.phm"
    model.write_text('model M\n  param m = 2.0 {unit = "kg"}\n  var v = 0 {unit = "m/s"}\n  input F {unit = "N"}\n'
                     '  der(v) = F/m\nend\n')
    t = np.linspace(0, 1, 11)
    write_table(tmp_path / "n.csv", ["t", "F"], np.column_stack([t, 3 + t]), {"t": "s", "F": "N"})
    write_table(tmp_path / "kn.csv", ["t", "F"], np.column_stack([t * 1000, (3 + t) / 1000]), {"t": "ms", "F": "kN"})
    for name in ("n", "kn"):
        assert main(["simulate", str(model), "--t-end", "1", "--dt", "0.1", "--input-data", str(tmp_path / f"{name}.csv"),
                     "-o", str(tmp_path / f"out_{name}.csv")]) == 0
    a, b = read_table(tmp_path / "out_n.csv"), read_table(tmp_path / "out_kn.csv")
    np.testing.assert_allclose(b.data, a.data, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.column("v")[-1], (3 * 1 + 0.5) / 2, rtol=1e-7)  # ∫(3 + t)/m dt, closed form


# ---------------------------------------------------------------- the sidecar's own checks
def test_a_sidecar_for_another_file_is_refused(tmp_path):
    (tmp_path / "d.csv").write_text("t,x\n0,1\n1,2\n")
    (tmp_path / "d.units.csv").write_text("column,unit\nt,s\ny,m\n")
    with pytest.raises(PdslError) as err:
        read_table(tmp_path / "d.csv")
    d = err.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("BadCsv", 3, 1) and "`y` is not a column of d.csv" in d.message


@pytest.mark.parametrize("text, line, fragment", [
    ("name,unit\nt,s\n", 1, "starts with the line `column,unit`"),
    ("column,unit\nt,s,extra\n", 2, "two cells"),
    ("column,unit\nt,s\nt,ms\n", 3, "two units"),
    ("column,unit\nt,ms\n", 2, "by the header of d.csv"),
])
def test_sidecar_errors_are_located(tmp_path, text, line, fragment):
    (tmp_path / "d.csv").write_text("t [s],x\n0,1\n1,2\n")
    (tmp_path / "d.units.csv").write_text(text)
    with pytest.raises(PdslError) as err:
        read_table(tmp_path / "d.csv")
    d = err.value.diagnostics[0]
    assert d.span.path.endswith("d.units.csv") and d.span.line == line and fragment in d.message


def test_a_stale_sidecar_is_removed(tmp_path):
    write_table(tmp_path / "d.csv", ["t", "x"], np.zeros((2, 2)), {"x": "m"})
    assert (tmp_path / "d.units.csv").is_file()
    write_table(tmp_path / "d.csv", ["t", "y"], np.zeros((2, 2)))  # a model without units, same file name
    assert not (tmp_path / "d.units.csv").exists()
    assert read_table(tmp_path / "d.csv").units == ()


def test_api_reads_units_of_a_dataframe_and_converts_them():
    """Model.evaluate (and fit) read df.attrs["units"]: a DataFrame in degrees scores as the one in radians."""
    pytest.importorskip("pint")
    pytest.importorskip("pandas")
    import pdsl

    m = pdsl.load(PENDULUM)
    df = m.simulate(2.0, 0.05).to_pandas()
    deg = df.copy()
    deg["theta"] *= 180 / math.pi
    deg["der(theta)"] *= 180 / math.pi
    deg.attrs["units"] = {**df.attrs["units"], "theta": "deg", "der(theta)": "deg/s"}
    a, b = m.evaluate(df), m.evaluate(deg)
    (sa,), (sb,) = a["scores"], b["scores"]
    np.testing.assert_allclose(sb.err, sa.err, rtol=1e-9, atol=1e-12)  # the same rollout error, sample by sample
    deg.attrs["units"]["theta"] = "m"  # a length for an angle: refused, wherever it comes from
    with pytest.raises(PdslError, match="different dimension"):
        m.evaluate(deg)
