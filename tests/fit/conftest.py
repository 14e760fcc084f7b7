"""Session fixtures: model files and simulated data for the fit tests (all seeded)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fit_helpers import NN_PENDULUM, SPRING_PENDULUM, TRUE_PENDULUM, simulate_csv


@pytest.fixture(scope="session")
def spring_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "spring_pendulum.phm"
    path.write_text(SPRING_PENDULUM)
    return path


@pytest.fixture(scope="session")
def spring_data(tmp_path_factory, spring_model) -> Path:
    """20 trajectories, 3 s at dt 0.03 (A3.1), true masses 1.3 and 0.7."""
    d = tmp_path_factory.mktemp("data")
    return simulate_csv(spring_model, d / "spring.csv", 20, 3.0, 0.03, "--param", "m1=1.3", "--param", "m2=0.7")


@pytest.fixture(scope="session")
def small_spring_data(tmp_path_factory, spring_model) -> Path:
    d = tmp_path_factory.mktemp("data")
    return simulate_csv(spring_model, d / "small.csv", 4, 0.6, 0.03, "--param", "m1=1.3", "--param", "m2=0.7")


@pytest.fixture(scope="session")
def nn_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "nn_pendulum.phm"
    path.write_text(NN_PENDULUM)
    return path


@pytest.fixture(scope="session")
def nn_data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    true = d / "pendulum.phm"
    true.write_text(TRUE_PENDULUM)
    return simulate_csv(true, d / "pendulum.csv", 6, 0.6, 0.03)
