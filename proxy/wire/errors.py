"""Kafka's error codes: ONE enum for all of group-replay (AGREED #6).

kio generates `ErrorCode` (an IntEnum, values from Kafka's `Errors.java`), so it is re-exported
here rather than copied: a module that needs a code names it `ErrorCode.unknown_member_id`, never
the number.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

_BY_VALUE: dict[int, ErrorCode] = {int(code.value): code for code in ErrorCode}


def error_code(value: int) -> ErrorCode:
    """The ErrorCode of a number read off the wire (`ValueError` for a code Kafka never sends)."""
    code = _BY_VALUE.get(value)
    if code is None:
        raise ValueError(f"{value} is not a Kafka error code")
    return code


def error_name(value: int) -> str:
    """`UNKNOWN_MEMBER_ID` (Kafka's spelling), or `UNKNOWN_ERROR_CODE(N)`."""
    code = _BY_VALUE.get(value)
    return code.name.upper() if code is not None else f"UNKNOWN_ERROR_CODE({value})"


__all__ = ["ErrorCode", "error_code", "error_name"]
