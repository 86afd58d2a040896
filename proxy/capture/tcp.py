"""Synthesized TCP connections for the capture: Ethernet/IPv4/TCP headers from templates.

scapy builds each stream's Ethernet/IPv4/TCP header once (`template`); per packet only the IP
total length, TCP seq/ack/flags and both checksums are patched in (`Side.header`), because
building a scapy packet per frame would cost hundreds of microseconds per frame. Used by
`proxy.capture.packets` (whole frames) and `proxy.capture.snapped` (header-only frames).
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from proxy.capture import KAFKA_PORT

MAX_SEGMENT = 65_000  # TCP payload per synthesized packet (IPv4 total length is 16 bits)
FLAG_SYN, FLAG_ACK, FLAG_PSH, FLAG_FIN = 0x02, 0x10, 0x08, 0x01
HEADERS_BYTES = 54  # Ethernet (14) + IPv4 without options (20) + TCP without options (20)
SEQ_AT = 38  # where the TCP sequence number sits in those headers

Buffer = bytes | bytearray | memoryview  # packet bytes: bytes, or a slice of a big frame without a copy
_HEADER = struct.Struct(">12sHBBHHHBBH4s4sHHIIBBHHH")  # Ethernet, IPv4 (no options), TCP (no options)
_WORDS = struct.Struct(">HH")


def payload_sum(payload: Buffer) -> int:
    """The RFC 1071 word sum of a payload modulo 0xFFFF, in C-level big-int operations.

    The bytes are read as one little-endian integer (no padding needed for an odd length, and
    faster than big-endian); since 2**16 == 1 (mod 0xFFFF) the sum of its 16-bit words is the
    integer itself modulo 0xFFFF. Large payloads are folded (low half + high half, at multiples of
    16 bits) before the one small division: a big-int division costs twice the conversion.
    Little-endian words are the byte-swapped big-endian ones, and swapping is a multiplication
    by 2**8 modulo 0xFFFF (RFC 1071's byte-order independence).
    """
    value = int.from_bytes(payload, "little")
    bits = len(payload) * 8
    while bits > 4096:
        half = ((bits + 31) // 32) * 16
        value = (value & _low_mask(half)) + (value >> half)
        bits = half + 1
    return (value << 8) % 0xFFFF


@functools.lru_cache(maxsize=512)
def _low_mask(bits: int) -> int:
    return (1 << bits) - 1


class Side:
    """One direction of a synthesized TCP connection, from a scapy-built header template.

    Per packet only the IP total length, TCP seq/ack/flags and both checksums change. The RFC 1071
    sum is linear modulo 0xFFFF, so the template's constant words are summed once here and each
    packet adds only its own variable words and its payload (one big-int reduction in C).
    """

    __slots__ = ("dport", "dst", "ip_constant", "macs", "snapped", "sport", "src", "tcp_constant")

    def __init__(self, template: bytes) -> None:
        self.macs = template[0:12]
        self.src = template[26:30]
        self.dst = template[30:34]
        self.sport, self.dport = _WORDS.unpack_from(template, 34)
        addresses = sum(_WORDS.unpack(self.src)) + sum(_WORDS.unpack(self.dst))
        self.ip_constant = 0x4500 + 0x4000 + 0x4006 + addresses  # ver/ihl, DF, ttl 64 / proto 6
        self.tcp_constant = addresses + 6 + self.sport + self.dport + 0xFFFF  # pseudo proto, window
        # What the native builder of header-only packets patches (`proxy.capture.snapped`): an
        # empty PSH/ACK packet's headers, seq, ack and TCP checksum zero.
        self.snapped = self.header(FLAG_PSH | FLAG_ACK, 0, 0, 0, None)

    def header(self, flags: int, seq: int, ack: int, length: int, body: int | None) -> bytes:
        """`body`: the payload's word sum modulo 0xFFFF (`payload_sum`); None for a packet whose
        payload is not all captured (its checksum cannot be known: written as 0, "not computed",
        as by a capture taken with checksum offload)."""
        ip_sum = (self.ip_constant + 40 + length) % 0xFFFF
        if body is None:
            tcp_checksum = 0
        else:
            tcp_sum = (self.tcp_constant + 20 + length + seq + ack + (0x5000 | flags) + body) % 0xFFFF
            tcp_checksum = 0xFFFF - (tcp_sum or 0xFFFF)
        return _HEADER.pack(
            self.macs, 0x0800,
            0x45, 0, 40 + length, 0, 0x4000, 64, 6, 0xFFFF - (ip_sum or 0xFFFF), self.src, self.dst,
            self.sport, self.dport, seq, ack, 0x50, flags, 0xFFFF, tcp_checksum, 0,
        )  # fmt: skip


class Stream:
    """One synthesized TCP connection: both directions and the next seq of each side."""

    __slots__ = ("client_seq", "server_seq", "to_client", "to_server", "units")

    def __init__(self, to_server: bytes, to_client: bytes) -> None:
        self.to_server = Side(to_server)
        self.to_client = Side(to_client)
        self.client_seq = 1
        self.server_seq = 1
        self.units: dict[tuple[bool, int], Any] = {}  # header-only block templates (capture.snapped)

    def packet(self, to_server: bool, flags: int, payload: Buffer, body: int | None = None) -> bytes:
        """A packet carrying `payload`; `body` is its `payload_sum` when already known."""
        if body is None:
            body = payload_sum(payload)
        return self.header(to_server, flags, len(payload), body) + payload

    def header(self, to_server: bool, flags: int, length: int, body: int | None) -> bytes:
        """The headers of the next packet (its payload of `length` bytes sums to `body`)."""
        if to_server:
            seq, ack, side = self.client_seq, self.server_seq, self.to_server
        else:
            seq, ack, side = self.server_seq, self.client_seq, self.to_client
        header = side.header(flags, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, length, body)
        advance = length + (1 if flags & (FLAG_SYN | FLAG_FIN) else 0)
        if to_server:
            self.client_seq += advance
        else:
            self.server_seq += advance
        return header


def _template(src_mac: str, dst_mac: str, src: tuple[str, int], dst: tuple[str, int]) -> bytes:
    packet = (
        Ether(src=src_mac, dst=dst_mac)
        / IP(src=src[0], dst=dst[0], ttl=64, flags="DF", id=0)
        / TCP(sport=src[1], dport=dst[1], flags="A", window=65535, seq=0, ack=0)
    )
    return bytes(packet)


def new_stream(conn: int, leg: int, broker_index: int) -> Stream:
    """The synthesized connection of `conn` on leg 0 (client) or 1 (upstream, to the broker
    numbered `broker_index`); the server side uses Kafka's port, so Wireshark dissects it."""
    client = (f"10.{1 + leg * 2}.{(conn >> 8) & 0xFF}.{conn & 0xFF}", 40000 + (conn >> 16) % 20000)
    if leg == 0:
        server = ("10.0.0.1", KAFKA_PORT)
    else:
        server = (f"10.4.{(broker_index >> 8) & 0xFF}.{broker_index & 0xFF}", KAFKA_PORT)
    client_mac, server_mac = "02:00:00:00:00:01", "02:00:00:00:00:02"
    return Stream(
        _template(client_mac, server_mac, client, server), _template(server_mac, client_mac, server, client)
    )


__all__ = ["FLAG_ACK", "FLAG_FIN", "FLAG_PSH", "FLAG_SYN", "MAX_SEGMENT", "Buffer", "Side", "Stream",
           "new_stream", "payload_sum"]  # fmt: skip
