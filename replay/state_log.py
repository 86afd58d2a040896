"""The served coordinator's log under `--state-dir`: its __consumer_offsets, as a file.

One record a line, `crc32 json` (the CRC, 8 hex digits, of the JSON text; the JSON is
`replay.coordinator.records.encode_record`'s). Records are appended in the order the coordinator
emits them and flushed before the answers that follow them, so a process that dies keeps every
record a client was told about (Kafka answers a commit once its record is in the log).

On start the file is read up to its first damaged line (a line cut short by a crash, a CRC that
does not match, a record that does not decode): what came before is loaded, the damaged tail is
kept aside in `coordinator-records.damaged` and the log is rewritten compacted (the last record of
every key, tombstones dropped, as Kafka's log cleaner keeps __consumer_offsets), as Kafka's log
recovery truncates a segment at its first invalid batch (LogSegment.recover).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from replay.coordinator.records import Record, RecordError, decode_record, encode_record

RECORDS_FILE = "coordinator-records.log"
DAMAGED_FILE = "coordinator-records.damaged"


class StateDirError(Exception):
    """The state directory cannot be used (the message says why)."""


@dataclass(frozen=True, slots=True)
class LogContents:
    records: list[Record]
    damage: str | None  # where reading stopped and why; None when the whole file was read
    damaged_bytes: bytes = b""


def encode_line(record: Record) -> bytes:
    text = json.dumps(encode_record(record), separators=(",", ":"), sort_keys=True).encode()
    return b"%08x %s\n" % (zlib.crc32(text), text)


def decode_line(line: bytes) -> Record:
    """The record of one line (without its newline); RecordError says what is wrong."""
    crc, _, text = line.partition(b" ")
    try:
        expected = int(crc, 16)
    except ValueError:
        raise RecordError("no CRC at the start of the line") from None
    if len(crc) != 8 or zlib.crc32(text) != expected:
        raise RecordError("CRC does not match the record")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"not JSON: {exc}") from None
    return decode_record(data)


def read_log(data: bytes, name: str = RECORDS_FILE) -> LogContents:
    """The records of a log's bytes, up to the first damaged line."""
    records: list[Record] = []
    start = 0
    line_number = 0
    while start < len(data):
        line_number += 1
        end = data.find(b"\n", start)
        if end < 0:
            damage = f"{name}:{line_number}: truncated record (no end of line)"
            return LogContents(records, damage, data[start:])
        try:
            records.append(decode_line(data[start:end]))
        except RecordError as exc:
            return LogContents(records, f"{name}:{line_number}: damaged record: {exc}", data[start:])
        start = end + 1
    return LogContents(records, None)


def compacted(records: list[Record]) -> list[Record]:
    """The last record of every key, in the order of those last records; tombstones dropped
    (nothing older is left for them to delete)."""
    last: dict[tuple[str, ...], Record] = {}
    for record in records:
        last.pop(record.key, None)
        last[record.key] = record
    return [r for r in last.values() if getattr(r, "value", True) is not None]


class StateLog:
    """The open log of a state directory: `open` reads and recovers it, `append` adds records."""

    def __init__(self, directory: Path, out: IO[bytes]) -> None:
        self.directory = directory
        self._out = out

    @classmethod
    def open(cls, directory: Path) -> tuple[StateLog, LogContents]:
        path = directory / RECORDS_FILE
        try:
            directory.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes() if path.exists() else b""
            contents = read_log(data)
            if contents.damage is not None:
                with (directory / DAMAGED_FILE).open("ab") as damaged:
                    damaged.write(contents.damaged_bytes)
            temporary = directory / (RECORDS_FILE + ".tmp")
            with temporary.open("wb") as rewritten:
                rewritten.writelines(encode_line(r) for r in compacted(contents.records))
                rewritten.flush()
                os.fsync(rewritten.fileno())
            os.replace(temporary, path)
            out = path.open("ab")
        except OSError as exc:
            raise StateDirError(f"state directory {directory}: {exc.strerror or exc}") from None
        return cls(directory, out), contents

    def append(self, records: list[Record]) -> None:
        """Write `records` and flush them to the operating system (a killed process keeps them)."""
        self._out.writelines(encode_line(r) for r in records)
        self._out.flush()

    def close(self) -> None:
        self._out.close()


__all__ = [
    "DAMAGED_FILE",
    "RECORDS_FILE",
    "LogContents",
    "StateDirError",
    "StateLog",
    "compacted",
    "decode_line",
    "encode_line",
    "read_log",
]
