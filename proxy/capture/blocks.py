"""pcapng block framing for the capture writer: the section header with its comment, one
interface per leg (`client`, `upstream`), and Enhanced Packet Blocks with nanosecond timestamps
and per-packet comments.

scapy 2.8's `RawPcapNgWriter` names interfaces and writes per-packet comments, but writes no
section-header options, only microsecond float timestamps, and always an unnamed interface 0.
`PcapNgBlocks` subclasses it for its block framing (`build_block`) and adds those three things.
"""

from __future__ import annotations

import struct
from typing import IO

from scapy.utils import RawPcapNgWriter

from proxy.capture.header import tool_version

EPB_HEAD = struct.Struct("<IIIIIII")


OPT_END = b"\x00\x00\x00\x00"


_TRAILER = struct.Struct("<I")


PADS = (b"", b"\x00\x00\x00", b"\x00\x00", b"\x00")  # by length % 4, to a 4-byte boundary
LEGS = ("client", "upstream")


LINKTYPE_ETHERNET = 1


class PcapNgBlocks(RawPcapNgWriter):
    """scapy's pcapng block framing, with SHB options, named interfaces and nanosecond stamps."""

    def __init__(self, handle: IO[bytes]) -> None:  # scapy's __init__ opens a path itself
        self.header_present = False
        self.tsresol = 1_000_000_000
        self.interfaces2id = {name.encode(): index for index, name in enumerate(LEGS)}
        self.endian = "<"
        self.endian_magic = b"\x4d\x3c\x2b\x1a"
        self.f = handle
        self.filename = getattr(handle, "name", "capture")

    def _option(self, code: int, value: bytes) -> bytes:
        return struct.pack("<HH", code, len(value)) + self._add_padding(value)

    def header_blocks(self, comment: str) -> bytes:
        shb_body = self.endian_magic + struct.pack("<HHq", 1, 0, -1)
        shb_options = (
            self._option(1, comment.encode())
            + self._option(4, f"group-replay {tool_version()}".encode())
            + struct.pack("<HH", 0, 0)
        )
        blocks = [self.build_block(b"\x0a\x0d\x0d\x0a", shb_body, options=shb_options)]
        for name in LEGS:
            idb_body = struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 262_144)
            options = self._option(2, name.encode()) + self._option(9, b"\x09") + struct.pack("<HH", 0, 0)
            blocks.append(self.build_block(struct.pack("<I", 1), idb_body, options=options))
        return b"".join(blocks)

    def packet_block(
        self,
        packet: bytes,
        interface: int,
        ts_ns: int,
        comments: bytes | list[bytes] | None,
        payload_bytes: int = 0,
        original_length: int | None = None,
    ) -> bytes:
        """An Enhanced Packet Block (built in one pass: this runs for every synthesized packet).

        With `payload_bytes`, `packet` is only the packet's headers: the block is sized for that
        many more bytes, which the caller writes right after the headers (at `EPB_PACKET_AT`).
        `original_length`: the packet's length on the wire when the block holds only its start.
        """
        caplen = len(packet) + payload_bytes
        pad = b"\x00" * (-caplen % 4)
        if comments is None:
            options = b""
        else:
            parts: list[bytes] = []
            for comment in [comments] if isinstance(comments, bytes) else comments:
                parts += (struct.pack("<HH", 1, len(comment)), comment, b"\x00" * (-len(comment) % 4))
            parts.append(OPT_END)
            options = b"".join(parts)
        total = 32 + caplen + len(pad) + len(options)
        head = EPB_HEAD.pack(
            6, total, interface, ts_ns >> 32, ts_ns & 0xFFFFFFFF, caplen, original_length or caplen
        )
        return b"".join((head, packet, pad, options, struct.pack("<I", total)))

    def packet_block_with_options(self, packet: bytes, interface: int, ts_ns: int, options: bytes) -> bytes:
        """`packet_block` with its options already encoded (ending in opt_endofopt)."""
        caplen = len(packet)
        pad = PADS[caplen & 3]
        total = 32 + caplen + len(pad) + len(options)
        head = EPB_HEAD.pack(6, total, interface, ts_ns >> 32, ts_ns & 0xFFFFFFFF, caplen, caplen)
        return b"".join((head, packet, pad, options, _TRAILER.pack(total)))


__all__ = ["LEGS", "LINKTYPE_ETHERNET", "PcapNgBlocks", "tool_version"]
