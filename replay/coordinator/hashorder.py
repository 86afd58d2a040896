"""The iteration order of the hash maps Kafka keeps a classic group's members in.

Where Kafka picks "any" member - the new leader after the leader leaves
(GroupMetadata.scala `remove`: `leaderId = members.keys.headOption`; ClassicGroup.java `remove`:
`leaderId = Optional.of(members.keySet().iterator().next())`), the first member still awaiting
join (`maybeElectNewJoinedLeader`), the member list a JoinGroup leader receives
(`currentMemberMetadata`) - it walks its members map, so the outcome follows the hash order of the
member ids. Two maps, two orders:

- the new coordinator (3.7+ with group.coordinator.new.enable, the only one on 4.1+):
  `java.util.HashMap<String, ClassicGroupMember>`: bucket `(h ^ h >>> 16) & (capacity - 1)`,
  entries of one bucket in insertion order; the table starts at 16 and doubles when a put makes
  the size exceed 3/4 of it (`++size > threshold`).
- the Scala GroupCoordinator (2.x/3.x default): Scala 2.13 `mutable.HashMap[String,
  MemberMetadata]`: the same improved hash and bucket, but each bucket is kept sorted by the
  improved hash (as a signed Int; `put0`: `while (n.hash <= hash) ...`), ties in insertion order;
  the table doubles when `contentSize + 1 >= threshold` before a put (threshold = 3/4 of it).

Neither table ever shrinks, so the capacity follows the largest size the map has had.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from enum import StrEnum
from functools import lru_cache


class MemberMapKind(StrEnum):
    JAVA_HASH_MAP = "java.util.HashMap"
    SCALA_HASH_MAP = "scala.collection.mutable.HashMap"


# UTF-16 in this machine's byte order, so that memoryview.cast("H") reads the code units.
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@lru_cache(maxsize=1 << 16)
def java_string_hash(text: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units (Scala's `##` on a String is the same)."""
    h = 0
    for unit in memoryview(text.encode(_UTF16_NATIVE)).cast("H"):  # the UTF-16 code units
        h = 31 * h + unit
    return _int32(h)  # Java's int overflow: the low 32 bits


def improved_hash(text: str) -> int:
    """`h ^ (h >>> 16)` (HashMap.hash in Java, HashMap.improveHash in Scala 2.13), signed."""
    h = java_string_hash(text) & 0xFFFFFFFF
    return _int32(h ^ (h >> 16))


def capacity_for(kind: MemberMapKind, peak_size: int) -> int:
    """The table length after the map has held `peak_size` entries (default capacity 16)."""
    capacity = 16
    if kind is MemberMapKind.JAVA_HASH_MAP:
        while peak_size > capacity * 3 // 4:
            capacity *= 2
    else:
        while peak_size >= capacity * 3 // 4:
            capacity *= 2
    return capacity


def hash_order(kind: MemberMapKind, keys: Iterable[str], peak_size: int = 0) -> list[str]:
    """`keys` (given in insertion order) in the order `kind` iterates them; `peak_size` is the
    largest size the map has had (at least the number of keys)."""
    ordered = list(keys)
    if len(ordered) < 2:
        return ordered
    mask = capacity_for(kind, max(peak_size, len(ordered))) - 1
    # Each key's hash once (a rebalance of a large group orders every member). Java's HashMap
    # keeps a bucket in insertion order; Scala's sorts it by the whole hash first.
    scala = kind is not MemberMapKind.JAVA_HASH_MAP
    hashes = [improved_hash(key) for key in ordered]
    decorated = sorted([(h & mask, h if scala else 0, i, ordered[i]) for i, h in enumerate(hashes)])
    return [entry[-1] for entry in decorated]


__all__ = ["MemberMapKind", "capacity_for", "hash_order", "improved_hash", "java_string_hash"]
