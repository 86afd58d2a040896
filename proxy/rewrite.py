"""Rewrite policies: ApiVersions caps, request re-encoding and membership edits.

A `RewritePolicy` plugs into `proxy.session.ProxySession` (its `RewritePolicy` protocol) and is
pure: frames in, frames out, no IO and no clock. The replay engine applies the same ideas in
process; the proxy applies them to live clients. YAML:

    name: cap-joingroup-v5              (optional; defaults to the file name)
    api_versions: {JoinGroup: 5}        cap the max_version the broker advertises in ApiVersions,
                                        so clients negotiate down on their own
    reencode: {JoinGroup: 5}            re-encode requests of an API to this version (with
                                        `proxy.wire.convert`); the response is converted back to the
                                        version the client asked for
    membership:                         per-client membership edits, first match wins
      - match: {client_id: "svc-*"}     or {ordinal: 0} (order of first JoinGroup seen)
        action: add | strip             add or strip group.instance.id
        instance_id: "{client_id}"      template for add: {client_id} {ordinal}
    allow_drop: [reason]                fields a lossy conversion may drop; a request whose
                                        conversion would drop anything else goes upstream as the
                                        client sent it (and `refused` counts it)

Membership edits on a request whose version cannot carry `group_instance_id` (JoinGroup below v5,
SyncGroup/Heartbeat below v3, OffsetCommit below v7, LeaveGroup below v3) re-encode it upward to the
first version that can, when the broker advertised it; the response goes back in the client's version.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from proxy.wire import (
    CodecError,
    PendingRequest,
    RequestHeaderInfo,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    supports,
)
from proxy.wire.apis import ApiKey, api_name
from proxy.wire.convert import ConversionError, convert

API_BY_NAME: dict[str, int] = {api_name(key): int(key) for key in ApiKey}
API_VERSIONS = int(ApiKey.API_VERSIONS)
# First version of each API that carries group_instance_id (KIP-345).
INSTANCE_ID_SINCE: dict[int, int] = {
    int(ApiKey.JOIN_GROUP): 5,
    int(ApiKey.SYNC_GROUP): 3,
    int(ApiKey.HEARTBEAT): 3,
    int(ApiKey.OFFSET_COMMIT): 7,
    int(ApiKey.LEAVE_GROUP): 3,
}


class PolicyError(ValueError):
    """A policy file that is not valid: the message names the file, line and field."""


@dataclass(frozen=True, slots=True)
class MembershipEdit:
    action: str  # "add" | "strip"
    client_id: str | None = None  # glob
    ordinal: int | None = None
    instance_id: str = "{client_id}"

    def matches(self, client_id: str, ordinal: int | None) -> bool:
        if self.client_id is not None and not fnmatch.fnmatchcase(client_id, self.client_id):
            return False
        return self.ordinal is None or self.ordinal == ordinal


@dataclass(slots=True)
class RewritePolicy:
    """The proxy session's rewrite hook, configured from YAML (`load_policy`)."""

    name: str = "rewrite"
    api_version_caps: dict[int, int] = field(default_factory=dict)
    reencode: dict[int, int] = field(default_factory=dict)
    membership: tuple[MembershipEdit, ...] = ()
    allow_drop: frozenset[str] = frozenset()
    # state (a policy is shared by the sessions of one proxy): client id -> ordinal
    ordinals: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # why requests were left as sent
    rewritten: int = 0

    # -- the session hook ---------------------------------------------------------------------
    def wants_request(self, api_key: int, api_version: int) -> bool:
        return api_key in self.reencode or (bool(self.membership) and api_key in INSTANCE_ID_SINCE)

    def wants_response(self, request: PendingRequest) -> bool:
        if request.api_key == API_VERSIONS:
            return bool(self.api_version_caps)
        return request.upstream_api_version != request.api_version

    def on_request(self, header: RequestHeaderInfo, request_frame: bytes) -> bytes:
        try:
            _, entity = decode_request(request_frame)
        except CodecError as exc:
            self.refused.append(f"{api_name(header.api_key)} v{header.api_version}: {exc}")
            return request_frame
        result = self.rewrite_request(header.api_key, entity, header.client_id or "")
        if result is entity:
            return request_frame
        self.rewritten += 1
        return encode_request(result, header.correlation_id, header.client_id)[4:]

    def on_response(self, request: PendingRequest, response_frame: bytes) -> bytes:
        try:
            _, entity = decode_response(response_frame, request.api_key, request.upstream_api_version)
        except CodecError:
            return response_frame  # e.g. an ApiVersions error answered in v0: nothing to cap
        if request.api_key == API_VERSIONS:
            capped = self.cap_api_versions(entity)
            return response_frame if capped is entity else encode_response(capped, request.correlation_id)[4:]
        converted = convert(entity, request.api_version).entity
        return encode_response(converted, request.correlation_id)[4:]

    # -- pure entity rewrites -----------------------------------------------------------------
    def cap_api_versions(self, response: Any) -> Any:
        """ApiVersions response with each capped API's max_version lowered to the cap."""
        changed = False
        keys = []
        for entry in response.api_keys:
            cap = self.api_version_caps.get(int(entry.api_key))
            if cap is not None and int(entry.max_version) > cap:
                entry = replace(entry, max_version=type(entry.max_version)(max(cap, int(entry.min_version))))
                changed = True
            keys.append(entry)
        return replace(response, api_keys=tuple(keys)) if changed else response

    def ordinal_of(self, client_id: str) -> int:
        if client_id not in self.ordinals:
            self.ordinals[client_id] = len(self.ordinals)
        return self.ordinals[client_id]

    def rewrite_request(self, api_key: int, entity: Any, client_id: str) -> Any:
        """The request to send upstream (the same object when nothing changes)."""
        api_version = int(type(entity).__version__)
        target_version = self.reencode.get(api_key, api_version)
        edit = None
        if self.membership and api_key in INSTANCE_ID_SINCE:
            if api_key == ApiKey.JOIN_GROUP:
                self.ordinal_of(client_id)
            ordinal = self.ordinals.get(client_id)
            edit = next((e for e in self.membership if e.matches(client_id, ordinal)), None)
            if edit is not None and edit.action == "add":
                target_version = max(target_version, INSTANCE_ID_SINCE[api_key])
        result = entity
        if target_version != api_version:
            try:
                conversion = convert(entity, target_version)
            except ConversionError as exc:
                self.refused.append(f"{api_name(api_key)} v{api_version} -> v{target_version}: {exc}")
                return entity
            lost = [
                loss for loss in conversion.dropped_fields if loss.path.split("[")[0] not in self.allow_drop
            ]
            if lost:
                self.refused.append(
                    f"{api_name(api_key)} v{api_version} -> v{target_version} from {client_id!r} would drop "
                    + ", ".join(str(loss) for loss in lost)
                )
                return entity
            result = conversion.entity
        if edit is not None:
            result = _edit_instance_id(result, edit, client_id, self.ordinals.get(client_id, 0))
        return result


def _edit_instance_id(entity: Any, edit: MembershipEdit, client_id: str, ordinal: int) -> Any:
    instance_id = (
        edit.instance_id.format(client_id=client_id, ordinal=ordinal) if edit.action == "add" else None
    )
    if hasattr(entity, "group_instance_id"):
        if entity.group_instance_id == instance_id:
            return entity
        return replace(entity, group_instance_id=instance_id)
    members = getattr(entity, "members", None)  # LeaveGroup v3+
    if members is not None and members and hasattr(members[0], "group_instance_id"):
        return replace(entity, members=tuple(replace(m, group_instance_id=instance_id) for m in members))
    return entity


# ---------------------------------------------------------------------------------------------
# YAML


def _fail(source: str, node: yaml.Node, path: str, message: str) -> PolicyError:
    return PolicyError(f"{source}:{node.start_mark.line + 1}: {path}: {message}")


def _scalar(source: str, node: yaml.Node, path: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise _fail(source, node, path, "expected a value")
    return yaml.safe_load(yaml.serialize(node))


def _mapping(
    source: str, node: yaml.Node, path: str, allowed: set[str] | None
) -> list[tuple[str, yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise _fail(source, node, path, "expected a mapping")
    out = []
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if allowed is not None and key not in allowed:
            raise _fail(
                source,
                key_node,
                f"{path}.{key}" if path else key,
                f"unknown key (allowed: {', '.join(sorted(allowed))})",
            )
        out.append((key, key_node, value_node))
    return out


def _versions(source: str, node: yaml.Node, path: str) -> dict[int, int]:
    result = {}
    for name, key_node, value_node in _mapping(source, node, path, None):
        if name not in API_BY_NAME:
            raise _fail(source, key_node, f"{path}.{name}", f"unknown API {name!r}")
        value = _scalar(source, value_node, f"{path}.{name}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(source, value_node, f"{path}.{name}", f"expected an integer version, got {value!r}")
        if not supports(API_BY_NAME[name], value):
            raise _fail(source, value_node, f"{path}.{name}", f"{name} has no version {value}")
        result[API_BY_NAME[name]] = value
    return result


def parse_policy(text: str, source: str) -> RewritePolicy:
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from exc
    if root is None:
        return RewritePolicy(name=Path(source).stem)
    policy = RewritePolicy(name=Path(source).stem)
    for key, _, node in _mapping(
        source, root, "", {"name", "api_versions", "reencode", "membership", "allow_drop"}
    ):
        match key:
            case "name":
                policy.name = str(_scalar(source, node, "name"))
            case "api_versions":
                policy.api_version_caps = _versions(source, node, "api_versions")
            case "reencode":
                policy.reencode = _versions(source, node, "reencode")
            case "allow_drop":
                if not isinstance(node, yaml.SequenceNode):
                    raise _fail(source, node, "allow_drop", "expected a list of field names")
                policy.allow_drop = frozenset(str(_scalar(source, n, "allow_drop")) for n in node.value)
            case "membership":
                if not isinstance(node, yaml.SequenceNode):
                    raise _fail(source, node, "membership", "expected a list")
                edits = []
                for i, item in enumerate(node.value):
                    path = f"membership[{i}]"
                    fields = {
                        k: v for k, _, v in _mapping(source, item, path, {"match", "action", "instance_id"})
                    }
                    if "match" not in fields or "action" not in fields:
                        raise _fail(source, item, path, "needs match and action")
                    action = _scalar(source, fields["action"], f"{path}.action")
                    if action not in ("add", "strip"):
                        raise _fail(
                            source, fields["action"], f"{path}.action", f"{action!r} is not add or strip"
                        )
                    match_fields = {
                        k: _scalar(source, v, f"{path}.match.{k}")
                        for k, _, v in _mapping(
                            source, fields["match"], f"{path}.match", {"client_id", "ordinal"}
                        )
                    }
                    ordinal = match_fields.get("ordinal")
                    if ordinal is not None and (isinstance(ordinal, bool) or not isinstance(ordinal, int)):
                        raise _fail(source, fields["match"], f"{path}.match.ordinal", "expected an integer")
                    edits.append(
                        MembershipEdit(
                            action=action,
                            client_id=match_fields.get("client_id"),
                            ordinal=ordinal,
                            instance_id=str(_scalar(source, fields["instance_id"], f"{path}.instance_id"))
                            if "instance_id" in fields
                            else "{client_id}",
                        )
                    )
                policy.membership = tuple(edits)
    return policy


def load_policy(path: str | Path) -> RewritePolicy:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_policy(text, str(path))


__all__ = ["MembershipEdit", "PolicyError", "RewritePolicy", "load_policy", "parse_policy"]
