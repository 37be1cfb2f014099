"""One CLI voice: bad input to any subcommand is one line, `llmservice <cmd>: error: ...`, on
stderr with exit status 1, never a traceback; argparse's usage errors say it the same way and
exit 1 too (2 is `llmservice size`'s "does not fit"). Every flag says what it is for."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from llmservice_operator.cli import SUBCOMMANDS, _parser, main
from llmservice_operator.commands.sim import build_parser as sim_parser

EXAMPLE = Path(__file__).parents[2] / "examples" / "llama-3.1-8b.yaml"


def _error_line(capsys: pytest.CaptureFixture[str], command: str) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"llmservice {command}: error: "), err
    return lines[0]


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run a subcommand that must refuse its input: exit 1, one line; the line."""
    assert main(argv) == 1
    return _error_line(capsys, argv[0])


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """argparse refuses: exit 1 (not 2), one line in the same voice; the line."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 1
    return _error_line(capsys, argv[0])


# -- size ---------------------------------------------------------------------------------------


def test_size_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(["size", "--model", "acme/unknown", "--max-model-len", "8192"], capsys)
    assert "no carried config.json for 'acme/unknown'" in line
    line = _fails(["size", "--model", "meta-llama/Llama-3.1-8B-Instruct"], capsys)
    assert line.endswith("--max-model-len is required")


def test_size_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(["size", "--max-model-len", "8192", "--bogus"], capsys)
    assert "unrecognized arguments: --bogus" in line


# -- plan ---------------------------------------------------------------------------------------


def test_plan_refuses_a_missing_or_empty_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.yaml"
    line = _fails(["plan", "-f", str(missing)], capsys)
    assert line.endswith(f"cannot read {missing}: No such file or directory")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert _fails(["plan", "-f", str(empty)], capsys).endswith(f"{empty} holds no LLMService")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    assert "document 1 is not a mapping" in _fails(["plan", "-f", str(listed)], capsys)


def test_plan_refuses_a_bad_gpu_catalog(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "gpus.yaml"
    line = _fails(["plan", "-f", str(EXAMPLE), "--gpu-catalog", str(missing)], capsys)
    assert "--gpu-catalog: cannot read GPU catalog" in line
    broken = tmp_path / "broken.yaml"
    broken.write_text("gpus: [\n")
    line = _fails(["plan", "-f", str(EXAMPLE), "--gpu-catalog", str(broken)], capsys)
    assert "not valid YAML" in line


def test_plan_refuses_a_spec_it_cannot_serve(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(EXAMPLE.read_text().replace("maxModelLen: 16384", "maxModelLen: 0"))
    line = _fails(["plan", "-f", str(spec)], capsys)
    assert f"{spec}: spec.engine.maxModelLen" in line


def test_plan_and_size_read_utf8_and_refuse_other_bytes_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    accented = tmp_path / "accented.yaml"
    env = "\n    env: [{name: GREETING, value: caf\u00e9}]"
    accented.write_bytes(
        EXAMPLE.read_text().replace("maxModelLen: 16384", "maxModelLen: 16384" + env).encode()
    )
    assert main(["plan", "-f", str(accented)]) == 0
    [deployment] = [
        d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Deployment"
    ]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "GREETING", "value": "caf\u00e9"} in container["env"]
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(EXAMPLE.read_bytes().replace(b"smallest", b"sm\xe4llest"))
    line = _fails(["plan", "-f", str(latin1)], capsys)
    assert line.endswith(
        f"{latin1} is not UTF-8 text: byte 0xe4 at offset 8 (invalid continuation byte); save it as UTF-8"
    )
    config = tmp_path / "config.json"
    config.write_bytes(b'{"model_type": "llama\xff"}')
    line = _fails(["size", "--model-config", str(config), "--max-model-len", "8192"], capsys)
    assert f"{config} is not UTF-8 text: byte 0xff" in line
    line = _fails(["plan", "-f", str(EXAMPLE), "--gpu-catalog", str(latin1)], capsys)
    assert f"GPU catalog {latin1} is not UTF-8 text: byte 0xe4" in line


def test_plan_and_size_refuse_a_number_python_will_not_parse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    digits = "1" * 5000
    spec = tmp_path / "long.yaml"
    spec.write_text(EXAMPLE.read_text().replace("maxModelLen: 16384", f"maxModelLen: {digits}"))
    assert "integer string conversion" in _fails(["plan", "-f", str(spec)], capsys)
    config = tmp_path / "config.json"
    config.write_text(f'{{"num_hidden_layers": {digits}}}')
    line = _fails(["size", "--model-config", str(config), "--max-model-len", "8192"], capsys)
    assert "integer string conversion" in line


def test_plan_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert "-f/--filename" in _usage_error(["plan"], capsys)


# -- crd ----------------------------------------------------------------------------------------


def test_crd_into_a_missing_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "missing" / "crd.yaml"
    line = _fails(["crd", "-o", str(target)], capsys)
    assert line.endswith(f"cannot write {target}: No such file or directory")
    assert main(["crd", "-o", str(tmp_path / "crd.yaml")]) == 0
    assert "kind: CustomResourceDefinition" in (tmp_path / "crd.yaml").read_text()


# -- sim ----------------------------------------------------------------------------------------


def test_sim_bad_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert "no model given" in _fails(["sim"], capsys)
    monkeypatch.setenv("LLMSERVICE_SIM_TIME_SCALE", "fast")
    line = _fails(["sim", "meta-llama/Llama-3.1-8B-Instruct"], capsys)
    assert "LLMSERVICE_SIM_TIME_SCALE='fast'" in line


def test_sim_usage_errors_name_no_internals(capsys: pytest.CaptureFixture[str]) -> None:
    assert "argument --port: invalid int value" in _usage_error(["sim", "m", "--port", "x"], capsys)
    line = _usage_error(["sim", "m", "--max-model-len", "12q"], capsys)
    assert "'12q' is not a length" in line and "_length" not in line


# -- load ---------------------------------------------------------------------------------------


def test_load_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(["load", "--rate", "1", "--duration", "1"], capsys)
    assert line.endswith("give --target URL (repeatable) or --service NAME")
    line = _fails(["load", "--target", "http://127.0.0.1:9", "--rate", "1"], capsys)
    assert line.endswith("give --rate and --duration (or --schedule FILE)")


def test_load_usage_errors_name_no_internals(capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(["load", "--prompt-tokens", "lots"], capsys)
    assert "'lots' is not a length distribution" in line
    assert "parse_length_dist" not in line


# -- help ---------------------------------------------------------------------------------------


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    return [
        "/".join(action.option_strings) or action.dest
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and action.help != argparse.SUPPRESS
        and not (action.help or "").strip()
    ]


@pytest.mark.parametrize("command", [c for c in SUBCOMMANDS if c not in ("run", "probe", "sim")])
def test_every_flag_has_help(command: str) -> None:
    _top, commands = _parser(command)
    assert _undocumented(commands[command]) == []


def test_every_sim_flag_has_help() -> None:
    assert _undocumented(sim_parser()) == []
