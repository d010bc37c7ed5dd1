"""Set-up files agree with each other."""

from __future__ import annotations

import sys

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def test_environment_yml_installs_the_project_with_dev_extra():
    text = (ROOT / "environment.yml").read_text()
    assert "- -e .[dev]" in text
    assert "- pip" in text and "python>=3.10" in text


def test_pyproject_declares_core_dependencies_cli_and_python():
    if tomllib is None:
        return
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]}
    assert {"pandas", "matplotlib", "papermill", "nbconvert", "nbformat", "ipykernel"} <= names
    assert project["scripts"]["qaeval"] == "qaeval.cli:entry"
    assert project["name"] == "qaeval-harness", "the name qaeval on PyPI is an unrelated package"
    assert project["entry-points"]["pytest11"]["qaeval"] == "qaeval.pytest_plugin"
    assert project["requires-python"] == ">=3.10"
    assert {"dev", "openai", "dask"} <= set(project["optional-dependencies"])
    env_python = "python>=" + project["requires-python"].removeprefix(">=")
    assert env_python in (ROOT / "environment.yml").read_text()
