"""The shared settings object and the command line's one declaration of the shared options."""

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.cli import main
from fairvision.cli.options import SHARED_OPTIONS, flag_message, with_settings
from fairvision.errors import FairvisionError, ParameterError


def test_defaults():
    s = AuditSettings()
    assert (s.correction, s.alpha, s.n_boot, s.level, s.seed, s.min_subjects) == ("holm", 0.05, 1000, 0.95, 0, 10)
    assert (s.engine, s.address, s.workers) == ("local", None, 1)
    assert DEFAULT_SETTINGS == s


@pytest.mark.parametrize("bad, parameter", [
    ({"correction": "sidak"}, "correction"), ({"alpha": 0}, "alpha"), ({"alpha": 1.5}, "alpha"),
    ({"level": 1}, "level"), ({"n_boot": -1}, "n_boot"), ({"n_boot": 2.5}, "n_boot"), ({"min_subjects": 0}, "min_subjects"),
    ({"workers": 0}, "workers"), ({"seed": -3}, "seed"), ({"seed": "x"}, "seed"), ({"engine": "spark"}, "engine"),
    ({"alpha": True}, "alpha"),
])
def test_validated_once_where_made(bad, parameter):
    with pytest.raises(ParameterError) as err:
        AuditSettings(**bad)
    assert err.value.parameter == parameter
    assert str(err.value).startswith(parameter + " ")
    assert isinstance(err.value, FairvisionError)


def test_replace_validates_and_meta_is_whole():
    s = AuditSettings(n_boot=0, seed=np.random.default_rng(1))
    assert s.replace(alpha=0.01).alpha == 0.01
    with pytest.raises(ParameterError):
        s.replace(alpha=2)
    meta = s.to_meta()
    assert set(meta) == {"correction", "alpha", "n_boot", "level", "seed", "min_subjects", "engine", "address", "workers"}
    assert meta["seed"] == "Generator"
    json.dumps(meta)
    assert AuditSettings(seed=None).to_meta()["seed"] is None


def test_flag_message_names_the_flag():
    assert flag_message("min_subjects must be at least 1", "min_subjects") == "--min-subjects must be at least 1"
    assert flag_message("lower_is_better names 'x'", "lower_is_better") == "--lower-is-better names 'x'"
    assert flag_message("something else", "alpha") == "something else"


def test_with_settings_adds_the_options_once_and_builds_settings():
    app = typer.Typer()
    seen = {}

    @app.command()
    @with_settings("alpha", "n_boot", "seed", n_boot=7, workers=2)
    def cmd(name: str = typer.Option("x", "--name"), settings: AuditSettings = None):
        seen["settings"], seen["name"] = settings, name

    runner = CliRunner()
    out = runner.invoke(app, ["--name", "y", "--alpha", "0.01"])
    assert out.exit_code == 0, out.output
    assert seen["name"] == "y"
    assert seen["settings"] == AuditSettings(alpha=0.01, n_boot=7, seed=0, workers=2)
    helped = runner.invoke(app, ["--help"]).output
    assert "--alpha" in helped and "--n-boot" in helped and "--correction" not in helped
    assert "[default: 7]" in helped  # the command's own default is shown
    with pytest.raises(TypeError):
        with_settings("nope")


def test_every_shared_flag_is_declared_once_in_the_cli():
    """No command module declares a shared option by hand: they all come from cli/options.py."""
    from pathlib import Path

    import ast

    cli = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "cli"
    flags = {flags[0] for _, flags, _ in SHARED_OPTIONS.values()}
    for path in sorted(cli.glob("*.py")):
        if path.name == "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "Option":
                declared = {a.value for a in node.args if isinstance(a, ast.Constant)} & flags
                assert not declared, f"{path.name}:{node.lineno} declares {declared} itself; use cli.options.with_settings"


def test_cli_names_the_flag_of_a_bad_setting(capsys, tmp_path):
    rc = main(["audit", "model", "-s", str(tmp_path / "s.csv"), "--scores", str(tmp_path / "c.csv"), "-a", "g",
               "--alpha", "2", "-o", str(tmp_path / "out")])
    assert rc == 2
    assert capsys.readouterr().err.strip() == "error: --alpha must be between 0 and 1, not 2.0"
    assert not (tmp_path / "out").exists()
