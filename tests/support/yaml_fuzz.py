"""Seeded YAML file fuzzing for scenarios and rewrite policies (issue 18 defect 4).

`mutations(seed_texts, count, seed)` makes damaged variants of real files: truncated, lines deleted,
duplicated, swapped or re-indented, values replaced by hostile ones (2^31, deep nesting, bad
templates, unsafe tags, rich markup, aliases), keys renamed, bytes that are not UTF-8. The rule
every variant must keep: through the real command line, exit 0, 1 or 2 with a message, never a
traceback, never a hang. Used by tests/test_yaml_fuzz.py (quick) and bench/yaml_fuzz.py (long).
"""

from __future__ import annotations

import contextlib
import io
import random
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

HOSTILE_VALUES = (
    "2147483648", "-1", "0", "-2147483649", "99999999999999999999999", "1e400", ".nan", "~", "''", "true",
    "2001-01-01", "'{colour}'", "'{client_id[0]}'", "'{ordinal.real}'", "'{ordinal:>999999999}'", "'{'",
    "'}'", "'{}'", "'{0}'", "!!python/name:os.system x", "!!binary AAAA", "!!int zz", "'[/x]'", "'[red]boom'",
    "&a [*a]", "*undefined", "{max: 2147483648}", "{max: -1}", "[1, 2", "{a: 1", "static", "dynamic",
    "as-recorded", "JoinGroup", "{ordinal: 0}", "{all: false}", "{all: true}", "'{client_id}-{ordinal}'",
    "1800000", "3600000", "1800001", "[]", "{}", "'x' * 3", "|\n  block", "\"\\xff\"", "'\u202e'",
)  # fmt: skip

KEYS = (
    "name", "description", "duration_ms", "broker_api_versions", "members", "match", "membership",
    "instance_id", "api_versions", "rolling", "order", "start_ms", "interval_ms", "downtime_ms",
    "leave_on_shutdown", "after", "faults", "api", "kind", "at_ms", "count", "delay_ms", "error_code",
    "expect", "rebalances", "fenced", "expired", "leader_skips_assignment", "errors", "client_id",
    "ordinal", "member_key", "leader", "all", "max", "min", "reencode", "allow_drop", "action", "colour",
)  # fmt: skip

NOISE = "{}[]:,-&*!|>'\"#%@\t\n ?=~0123456789abcxyz"

POLICY_SEEDS = (
    "name: cap-v5\napi_versions: {JoinGroup: 5, Heartbeat: 3}\nreencode: {JoinGroup: 5}\n"
    "allow_drop: [reason]\n",
    "membership:\n  - match: {client_id: 'svc-*'}\n    membership: static\n"
    "    instance_id: '{client_id}-{ordinal}'\n  - match: {ordinal: 1}\n    action: strip\n"
    "  - match: {instance_id: 'keep-*'}\n    membership: as-recorded\n",
    "reencode:\n  JoinGroup: 9\n  SyncGroup: 5\nmembership:\n  - {match: {all: true}, action: add}\n",
)


def scenario_seeds() -> list[str]:
    """The built-in scenarios' text (replay/scenarios/*.yaml)."""
    root = resources.files("replay") / "scenarios"
    return [
        p.read_text(encoding="utf-8") for p in sorted(root.iterdir(), key=str) if p.name.endswith(".yaml")
    ]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True) or [""]


def _mutate_once(text: str, rng: random.Random) -> str | bytes:  # noqa: C901 - one flat `match`
    # over the twelve mutation kinds, kept in one place to read.
    lines = _lines(text)
    i = rng.randrange(len(lines))
    match rng.randrange(12):
        case 0:  # truncated
            return text[: rng.randrange(len(text) + 1)]
        case 1:
            del lines[i]
        case 2:
            lines.insert(i, lines[i])
        case 3:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        case 4 | 5:  # a value replaced by a hostile one
            line = lines[i]
            head, sep, _ = line.partition(": ")
            if sep:
                lines[i] = f"{head}: {rng.choice(HOSTILE_VALUES)}\n"
            else:
                lines[i] = line.rstrip("\n") + f" {rng.choice(HOSTILE_VALUES)}\n"
        case 6:  # re-indented
            line = lines[i]
            lines[i] = " " * rng.randrange(0, 7) + line.lstrip(" ")
        case 7:  # noise characters
            at = rng.randrange(len(text) + 1)
            return text[:at] + "".join(rng.choice(NOISE) for _ in range(rng.randrange(1, 6))) + text[at:]
        case 8:  # a key renamed
            line = lines[i]
            stripped = line.lstrip(" -")
            _, sep, rest = stripped.partition(":")
            if sep:
                lines[i] = line[: len(line) - len(stripped)] + rng.choice(KEYS) + sep + rest
        case 9:  # deep nesting
            depth = rng.choice((3, 40, 400, 6000))
            head, sep, _ = lines[i].partition(": ")
            lines[i] = f"{head if sep else 'members'}: {'[' * depth}{']' * depth}\n"
        case 10:  # a number changed
            tokens = [
                t for t in lines[i].replace(",", " ").replace("}", " ").split() if t.lstrip("-").isdigit()
            ]
            if tokens:
                number = rng.choice(tokens)
                lines[i] = lines[i].replace(
                    number, str(rng.choice((2**31, 2**63, -(2**31), 10**30, 0, -1))), 1
                )
        case _:  # not UTF-8
            data = text.encode()
            at = rng.randrange(len(data) + 1)
            return data[:at] + bytes([rng.choice((0xFF, 0xFE, 0xC3, 0x80))]) + data[at:]
    return "".join(lines)


def mutations(
    seed_texts: list[str] | tuple[str, ...], count: int, seed: int
) -> Iterator[tuple[int, str | bytes]]:
    """(case number, mutated file content): 1-3 mutations of a seed text each, reproducible."""
    rng = random.Random(seed)
    for case in range(count):
        content: str | bytes = rng.choice(seed_texts)
        for _ in range(rng.randrange(1, 4)):
            if isinstance(content, bytes):
                break
            content = _mutate_once(content, rng)
        yield case, content


def exercise_policy(policy: Any) -> int:
    """A loaded policy on real requests (JoinGroup v4 and v9 from three clients, an ApiVersions
    answer): membership templates render, caps apply. Returns 0 (a command's exit code)."""
    from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16

    from proxy.wire.convert import convert
    from tests.support.group_entities import join_request, ms

    join = join_request(group_instance_id="keep-1", metadata=b"\x00")
    for client_id, api_version in (("svc-1", 4), ("other", 9), ("keep-1", 9)):
        policy.rewrite_request(11, convert(join, api_version).entity, client_id)
    response = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(ApiVersion(api_key=i16(11), min_version=i16(0), max_version=i16(9)),),
        throttle_time=ms(0),
    )
    policy.cap_api_versions(response)
    return 0


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@dataclass(frozen=True, slots=True)
class Outcome:
    case: int
    command: str
    exit_code: int | None  # None: an exception escaped (a traceback) or it hung
    seconds: float
    stderr: str
    problem: str | None = None  # why the rule was broken, None when it held


class _Hang(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _Hang


def run_in_process(
    case: int, command: str, call: Callable[[], int], limit_s: float, must_name: str | None = None
) -> Outcome:
    """Run `call` (a command's main) with its output captured and a hang guard of `limit_s`.
    The rule: exit 0, 1 or 2; 2 comes with a message (naming `must_name`, the file, when given)."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code: int | None = call()
        problem = None
    except _Hang:
        code, problem = None, f"no answer within {limit_s} s"
    except BaseException as exc:  # that is what is being looked for
        code, problem = None, "traceback: " + "".join(traceback.format_exception(exc))[-2000:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - started
    stderr = err.getvalue()
    if problem is None:
        problem = rule_problem(code, stderr, must_name)
    return Outcome(case, command, code, seconds, stderr, problem)


def rule_problem(code: int | None, stderr: str, must_name: str | None) -> str | None:
    if code not in (0, 1, 2):
        return f"exit code {code}"
    if "Traceback" in stderr:
        return "traceback on stderr: " + stderr[-2000:]
    if code == 2 and not stderr.strip():
        return "exit 2 without a message"
    if code == 2 and must_name is not None and must_name not in stderr:
        return f"exit 2 without naming {must_name}: {stderr[-500:]}"
    return None


__all__ = [
    "POLICY_SEEDS",
    "Outcome",
    "exercise_policy",
    "mutations",
    "rule_problem",
    "run_in_process",
    "scenario_seeds",
    "write",
]
