"""pcapng block parsing (SHB, IDB, EPB with their options), tolerant of a truncated tail.

Reading needs no scapy: a capture cut short by kill -9 ends in a partial block, and this parser
stops there and says where, instead of raising from deep inside a generic reader.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

SHB_TYPE = 0x0A0D0D0A
IDB_TYPE = 0x00000001
EPB_TYPE = 0x00000006
BYTE_ORDER_MAGIC = 0x1A2B3C4D
OPT_END = 0
OPT_COMMENT = 1
OPT_SHB_USERAPPL = 4
OPT_IF_NAME = 2
OPT_IF_TSRESOL = 9


class CaptureFormatError(ValueError):
    """Not a pcapng file at all (damage after a valid start is reported, not raised)."""


@dataclass(slots=True)
class Interface:
    name: str
    linktype: int
    ts_per_second: int = 1_000_000


@dataclass(slots=True)
class Packet:
    interface: int
    ts_ns: int
    data: bytes
    comments: list[str] = field(default_factory=list)
    original_length: int | None = None  # set when the block holds less than the packet had (snapped)


@dataclass(slots=True)
class Section:
    comments: list[str] = field(default_factory=list)
    user_application: str | None = None
    interfaces: list[Interface] = field(default_factory=list)


def _options(data: bytes, offset: int, end: int, endian: str) -> Iterator[tuple[int, bytes]]:
    while offset + 4 <= end:
        code, length = struct.unpack_from(endian + "HH", data, offset)
        offset += 4
        if code == OPT_END:
            return
        yield code, data[offset : offset + length]
        offset += (length + 3) & ~3


def _tsresol(raw: bytes) -> int:
    """Ticks per second (pcapng if_tsresol); raises ValueError when it is not one byte of sense."""
    if len(raw) != 1:
        raise ValueError(f"if_tsresol option of {len(raw)} bytes")
    value = raw[0]
    exponent = value & 0x7F
    if exponent > (63 if value & 0x80 else 18):
        raise ValueError(f"if_tsresol {value:#x} out of range")
    return int(2**exponent if value & 0x80 else 10**exponent)


def parse(data: bytes) -> tuple[Section, list[Packet], str | None]:  # noqa: C901 - one pass over pcapng's block kinds, each a branch
    """(section, packets, damage) where damage says where and why reading stopped early."""
    if len(data) < 12 or struct.unpack_from("<I", data, 0)[0] != SHB_TYPE:
        raise CaptureFormatError("not a pcapng file (no section header block)")
    magic = data[8:12]
    if magic == b"\x4d\x3c\x2b\x1a":
        endian = "<"
    elif magic == b"\x1a\x2b\x3c\x4d":
        endian = ">"
    else:
        raise CaptureFormatError("not a pcapng file (bad byte-order magic)")
    section = Section()
    packets: list[Packet] = []
    offset = 0
    size = len(data)
    while offset < size:
        if size - offset < 12:
            return section, packets, f"truncated block header at byte {offset} ({size - offset} bytes left)"
        block_type, total = struct.unpack_from(endian + "II", data, offset)
        if total < 12 or total % 4:
            return section, packets, f"corrupt block length {total} at byte {offset}"
        if offset + total > size:
            return (
                section,
                packets,
                (f"truncated block at byte {offset}: {total} bytes announced, {size - offset} present"),
            )
        (trailer,) = struct.unpack_from(endian + "I", data, offset + total - 4)
        if trailer != total:
            return section, packets, f"corrupt block at byte {offset}: trailing length {trailer} != {total}"
        if block_type == SHB_TYPE and offset:
            return section, packets, f"a second section at byte {offset} (not written by group-replay)"
        try:
            _block(data, offset, total, block_type, endian, section, packets)
        except (struct.error, ValueError, IndexError) as exc:
            return section, packets, f"corrupt block at byte {offset}: {exc}"
        offset += total
    return section, packets, None


def _block(  # noqa: C901 - one branch per pcapng block type and option, as the spec lists them
    data: bytes,
    offset: int,
    total: int,
    block_type: int,
    endian: str,
    section: Section,
    packets: list[Packet],
) -> None:
    """Reads one block into `section`/`packets`; raises struct.error/ValueError when it is corrupt."""
    body = offset + 8
    end = offset + total - 4
    if block_type == SHB_TYPE:
        if total < 28:
            raise ValueError("section header block too short")
        for code, value in _options(data, body + 16, end, endian):
            if code == OPT_COMMENT:
                section.comments.append(value.decode("utf-8", "replace"))
            elif code == OPT_SHB_USERAPPL:
                section.user_application = value.decode("utf-8", "replace")
    elif block_type == IDB_TYPE:
        if total < 20:
            raise ValueError("interface block too short")
        linktype = struct.unpack_from(endian + "H", data, body)[0]
        interface = Interface(name=f"if{len(section.interfaces)}", linktype=linktype)
        for code, value in _options(data, body + 8, end, endian):
            if code == OPT_IF_NAME:
                interface.name = value.decode("utf-8", "replace")
            elif code == OPT_IF_TSRESOL:
                interface.ts_per_second = _tsresol(value)
        section.interfaces.append(interface)
    elif block_type == EPB_TYPE:
        if total < 32:
            raise ValueError("packet block too short")
        if_id, ts_high, ts_low, caplen, orig = struct.unpack_from(endian + "IIIII", data, body)
        start = body + 20
        packet_end = start + caplen
        if packet_end > end or if_id >= len(section.interfaces):
            raise ValueError("packet data past its block, or an unknown interface")
        ticks = (ts_high << 32) | ts_low
        per_second = section.interfaces[if_id].ts_per_second
        ts_ns = ticks * 1_000_000_000 // per_second
        comments = [
            value.decode("utf-8", "replace")
            for code, value in _options(data, (packet_end + 3) & ~3, end, endian)
            if code == OPT_COMMENT
        ]
        packets.append(
            Packet(if_id, ts_ns, data[start:packet_end], comments, orig if orig > caplen else None)
        )


def tcp_payload(packet: bytes, snapped: bool = False) -> tuple[bytes, tuple[bytes, int, bytes, int]]:
    """(payload, (src ip, src port, dst ip, dst port)) of an Ethernet/IPv4/TCP packet.
    `snapped`: the block holds only the packet's start (captured < original length): the payload
    is what was captured."""
    if len(packet) < 54 or packet[12:14] != b"\x08\x00":
        raise ValueError("not an Ethernet/IPv4 packet")
    ihl = (packet[14] & 0x0F) * 4
    ip_end = 14 + ihl
    total_length = struct.unpack_from(">H", packet, 16)[0]
    if packet[23] != 6:
        raise ValueError("not TCP")
    if snapped:
        total_length = min(total_length, len(packet) - 14)
    if ihl < 20 or ip_end + 20 > len(packet) or 14 + total_length > len(packet):
        raise ValueError(f"IPv4 header or total length past the packet ({len(packet)} bytes)")
    src, dst = packet[26:30], packet[30:34]
    sport, dport = struct.unpack_from(">HH", packet, ip_end)
    data_offset = (packet[ip_end + 12] >> 4) * 4
    if data_offset < 20 or ip_end + data_offset > 14 + total_length:
        raise ValueError(f"TCP data offset {data_offset} past the packet")
    return packet[ip_end + data_offset : 14 + total_length], (src, sport, dst, dport)
