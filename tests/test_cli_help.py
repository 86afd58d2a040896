"""Every option of every `group-replay` subcommand has help text (issue 17): the argparse tree of
each command, as its module builds it, walked down to the subcommands' options."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

import group_replay


class _Captured(BaseException):
    """Raised instead of parsing, carrying the parser; no command catches a BaseException."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def _parser_of(command: str, monkeypatch: pytest.MonkeyPatch, *sub: str) -> argparse.ArgumentParser:
    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Captured(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    with pytest.raises(_Captured) as caught:
        group_replay.main([command, *sub, "--help"])
    return caught.value.parser


# Subcommands a command dispatches to a parser of their own before its main parser runs.
OWN_PARSERS = {("demo", "group")}


def _undocumented(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            for name, sub in action.choices.items():
                if name not in helped:
                    yield f"{path} {name} (the subcommand)"
                yield from _undocumented(sub, f"{path} {name}")
            continue
        if not action.help:  # argparse.SUPPRESS: hidden on purpose
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


WITH_SUBPARSERS = [*sorted(group_replay.COMMANDS), *(" ".join(pair) for pair in sorted(OWN_PARSERS))]


@pytest.mark.parametrize("command", WITH_SUBPARSERS)
def test_every_option_has_help(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser_of(*command.split()[:1], monkeypatch, *command.split()[1:])
    assert list(_undocumented(parser, f"group-replay {command}")) == []


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def test_readme_commands_match_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """README's command list names every command, and only options the commands have."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Commands", 1)[1].split("```")[1]
    lines = [line for line in block.splitlines() if line.startswith("group-replay ")]
    listed = {line.split()[1] for line in lines}
    assert listed == set(group_replay.COMMANDS)
    for line in lines:
        command = line.split()[1]
        sub = tuple(line.split()[2:3]) if (command, *line.split()[2:3]) in OWN_PARSERS else ()
        options = _options(_parser_of(command, monkeypatch, *sub))
        for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            assert option in options, f"README: {line!r} names {option}, which `{command}` does not have"


_WITHOUT_EXTRAS = (
    "import sys\n"
    "for name in {modules!r}:\n"
    "    sys.modules[name] = None  # as after README's install without this extra\n"
    "import group_replay\n"
    "sys.exit(group_replay.main(sys.argv[1:]))\n"
)


def _without_extras(tmp_path: object, *argv: str) -> subprocess.CompletedProcess[str]:
    modules = sorted(group_replay.EXTRA_OF_MODULE)
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS.format(modules=modules), *argv],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


_EVERY_HELP = (
    "import contextlib, io, json, sys\n"
    "for name in {modules!r}:\n"
    "    sys.modules[name] = None  # as after README's install without this extra\n"
    "import group_replay\n"
    "answers = {{}}\n"
    "for command in {commands!r}:\n"
    "    out, err = io.StringIO(), io.StringIO()\n"
    "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
    "        try:\n"
    "            code = group_replay.main([command, '--help'])\n"
    "        except SystemExit as exc:  # argparse's --help exits\n"
    "            code = exc.code or 0\n"
    "        except Exception as exc:\n"
    "            code, err = 1, io.StringIO(repr(exc))\n"
    "    answers[command] = (code, out.getvalue(), err.getvalue())\n"
    "print(json.dumps(answers))\n"
)


@pytest.fixture(scope="module")
def helps_without_extras(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """command -> (exit code, stdout, stderr) of `group-replay COMMAND --help` without any extra.

    One interpreter answers every command (each import of group_replay costs seconds on a loaded
    machine, and kio's import is most of it); the extras stay blocked for all of them."""
    commands = sorted(group_replay.COMMANDS)
    script = _EVERY_HELP.format(modules=sorted(group_replay.EXTRA_OF_MODULE), commands=commands)
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=str(tmp_path_factory.mktemp("help")),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return {command: (code, out, err) for command, (code, out, err) in json.loads(result.stdout).items()}


@pytest.mark.parametrize("command", sorted(group_replay.COMMANDS))
def test_every_command_answers_help_without_any_extra(
    command: str, helps_without_extras: dict[str, tuple[int, str, str]]
) -> None:
    code, stdout, stderr = helps_without_extras[command]
    assert code == 0, stderr
    assert "usage: group-replay" in stdout


@pytest.mark.parametrize(("argv", "extra"), [(("validate", "."), "spark"), (("demo",), "clients")])
def test_a_command_needing_an_extra_says_which_in_one_line(
    argv: tuple[str, ...], extra: str, tmp_path: object
) -> None:
    result = _without_extras(tmp_path, *argv)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"group-replay {argv[0]}: needs the {extra}" in line and "pip install 'group-replay[" in line
