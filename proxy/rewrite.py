"""Rewrite policies: ApiVersions caps, request re-encoding and membership edits.

A `RewritePolicy` plugs into `proxy.session.ProxySession` (its `RewritePolicy` protocol) and is
pure: frames in, frames out, no IO and no clock. The replay engine applies the same ideas in
process; the proxy applies them to live clients. YAML:

    name: cap-joingroup-v5              (optional; defaults to the file name)
    api_versions: {JoinGroup: 5}        cap the max_version the broker advertises in ApiVersions,
                                        so clients negotiate down on their own; a cap lowers
                                        max_version (never below min_version) and never removes
                                        an API, so capping anything leaves ConsumerGroupHeartbeat
    hide_apis: [ConsumerGroupHeartbeat, ConsumerGroupDescribe]
                                        remove these APIs from ApiVersions (a broker without
                                        KIP-848: clients fall back to the classic protocol or
                                        fail as they would there); only the KIP-848 APIs, and
                                        only when named here
    reencode: {JoinGroup: 5}            re-encode requests of an API to this version (with
                                        `proxy.wire.convert`); the response is converted back to the
                                        version the client asked for
    membership:                         per-client membership edits, first match wins
      - match: {client_id: "svc-*"}     or {ordinal: 0} (order of first JoinGroup seen), or
                                        {instance_id: glob} (as the client sent it), {all: true}
        membership: static | dynamic    add or strip group.instance.id (as-recorded: leave it);
                                        the older spelling `action: add | strip` is still read
        instance_id: "{client_id}"      template for static: {client_id} {ordinal}
    allow_drop: [reason]                fields a lossy conversion may drop; a request whose
                                        conversion would drop anything else goes upstream as the
                                        client sent it (and `refused` counts it)

The membership words are `proxy.membership`'s, the same a replay scenario uses; the file is read by
`proxy.yaml_reader`, so every error names the file, line and field (`PolicyError`).

Membership edits on a request whose version cannot carry `group_instance_id` (JoinGroup below v5,
SyncGroup/Heartbeat below v3, OffsetCommit below v7, LeaveGroup below v3) re-encode it upward to the
first version that can, when the broker advertised it; the response goes back in the client's version.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from proxy.membership import (
    LEGACY_ACTIONS,
    MemberSelector,
    Membership,
    read_instance_id,
    read_selector,
    render_instance_id,
)
from proxy.wire import (
    CodecError,
    PendingRequest,
    RequestHeaderInfo,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from proxy.wire.apis import CONSUMER_PROTOCOL_API_KEYS, ApiKey, api_name
from proxy.wire.convert import ConversionError, convert
from proxy.yaml_reader import YamlInputError, YamlReader, compose, read_text

API_VERSIONS = int(ApiKey.API_VERSIONS)
# First version of each API that carries group_instance_id (KIP-345).
INSTANCE_ID_SINCE: dict[int, int] = {
    int(ApiKey.JOIN_GROUP): 5,
    int(ApiKey.SYNC_GROUP): 3,
    int(ApiKey.HEARTBEAT): 3,
    int(ApiKey.OFFSET_COMMIT): 7,
    int(ApiKey.LEAVE_GROUP): 3,
}


# What a policy's `match:` may name (replay's member_key and leader are unknown to the proxy) and
# the placeholders its instance_id template may use.
POLICY_SELECTOR_KEYS = ("client_id", "ordinal", "instance_id", "all")
POLICY_PLACEHOLDERS = ("client_id", "ordinal")


class PolicyError(YamlInputError):
    """A policy file that is not valid: the message names the file, line and field."""


@dataclass(frozen=True, slots=True)
class MembershipEdit:
    """One `membership:` rule: members matching `match` become `membership`."""

    membership: Membership
    match: MemberSelector = field(default_factory=MemberSelector)
    instance_id: str = "{client_id}"  # template for static (checked by proxy.membership)

    def matches(self, client_id: str, ordinal: int | None, instance_id: str | None) -> bool:
        return self.match.matches(client_id=client_id, ordinal=ordinal, instance_id=instance_id)


@dataclass(slots=True)
class RewritePolicy:
    """The proxy session's rewrite hook, configured from YAML (`load_policy`)."""

    name: str = "rewrite"
    api_version_caps: dict[int, int] = field(default_factory=dict)
    hidden_apis: frozenset[int] = frozenset()  # removed from ApiVersions (KIP-848's, named explicitly)
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
            return bool(self.api_version_caps or self.hidden_apis)
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
    def api_versions_changes(self) -> tuple[str, ...]:
        """What this policy does to ApiVersions, one line per API key (printed when the proxy
        starts, so a cap never changes an API unnoticed)."""
        caps = [
            f"{api_name(k)} ({k}): max_version capped at {v}"
            for k, v in sorted(self.api_version_caps.items())
        ]
        hidden = [f"{api_name(k)} ({k}): hidden (hide_apis)" for k in sorted(self.hidden_apis)]
        return tuple(caps + hidden)

    def cap_api_versions(self, response: Any) -> Any:
        """ApiVersions response with each capped API's max_version lowered to the cap and the
        hidden APIs removed; no other entry is ever removed."""
        changed = False
        keys = []
        for entry in response.api_keys:
            if int(entry.api_key) in self.hidden_apis:
                changed = True
                continue
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
            sent = _sent_instance_id(entity)
            edit = next((e for e in self.membership if e.matches(client_id, ordinal, sent)), None)
            if edit is not None and edit.membership == Membership.AS_RECORDED:
                edit = None  # matched, and left as the client sent it
            if edit is not None and edit.membership == Membership.STATIC:
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


def _sent_instance_id(entity: Any) -> str | None:
    """The group.instance.id the client sent (JoinGroup & co, or LeaveGroup v3+'s first member)."""
    if hasattr(entity, "group_instance_id"):
        return entity.group_instance_id  # type: ignore[no-any-return]
    members = getattr(entity, "members", None)
    if members and hasattr(members[0], "group_instance_id"):
        return members[0].group_instance_id  # type: ignore[no-any-return]
    return None


def _edit_instance_id(entity: Any, edit: MembershipEdit, client_id: str, ordinal: int) -> Any:
    instance_id = (
        render_instance_id(edit.instance_id, client_id=client_id, ordinal=ordinal)
        if edit.membership == Membership.STATIC
        else None
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
# YAML (proxy.yaml_reader; membership words from proxy.membership)


def _membership_edit(r: YamlReader, node: Any, path: str) -> MembershipEdit:
    fields = r.mapping(node, path, {"match", "membership", "action", "instance_id"}, {"match"})
    if "membership" in fields and "action" in fields:
        raise r.fail(fields["action"], f"{path}.action", "give membership (or the older action), not both")
    if "membership" in fields:
        membership = r.choice(fields["membership"], f"{path}.membership", Membership)
    elif "action" in fields:
        action = r.string(fields["action"], f"{path}.action")
        if action not in LEGACY_ACTIONS:
            raise r.fail(
                fields["action"],
                f"{path}.action",
                f"{action!r} is not add or strip (or write membership: static | dynamic | as-recorded)",
            )
        membership = LEGACY_ACTIONS[action]
    else:
        raise r.fail(node, f"{path}.membership", "required key is missing (static | dynamic | as-recorded)")
    instance_id = "{client_id}"
    if "instance_id" in fields:
        if membership != Membership.STATIC:
            raise r.fail(
                fields["instance_id"], f"{path}.instance_id", "only a static member has an instance id"
            )
        instance_id = read_instance_id(r, fields["instance_id"], f"{path}.instance_id", POLICY_PLACEHOLDERS)
    return MembershipEdit(
        membership=membership,
        match=read_selector(r, fields["match"], f"{path}.match", POLICY_SELECTOR_KEYS),
        instance_id=instance_id,
    )


def _hidden_apis(r: YamlReader, node: Any) -> frozenset[int]:
    """`hide_apis: [ConsumerGroupHeartbeat, ...]`: only the KIP-848 APIs may be hidden (the
    rehearsal of a broker without them); any other name is an error naming file:line:field."""
    hidden = set()
    for i, item in enumerate(r.sequence(node, "hide_apis")):
        path = f"hide_apis[{i}]"
        api_key = r.api(item, path)
        if api_key not in CONSUMER_PROTOCOL_API_KEYS:
            allowed = " and ".join(api_name(k) for k in sorted(CONSUMER_PROTOCOL_API_KEYS))
            raise r.fail(item, path, f"{api_name(api_key)} cannot be hidden (only {allowed})")
        hidden.add(api_key)
    return frozenset(hidden)


def parse_policy(text: str, source: str) -> RewritePolicy:
    """Parse and validate a policy; raises PolicyError naming source, line and field."""
    root = compose(text, source, PolicyError)
    policy = RewritePolicy(name=Path(source).stem)
    if root is None:
        return policy
    r = YamlReader(source, PolicyError)
    fields = r.mapping(
        root, "", {"name", "api_versions", "hide_apis", "reencode", "membership", "allow_drop"}
    )
    if "name" in fields:
        policy.name = r.string(fields["name"], "name")
    if "api_versions" in fields:
        policy.api_version_caps = {
            k: v for k, v, _ in r.api_versions(fields["api_versions"], "api_versions", False)
        }
    if "hide_apis" in fields:
        policy.hidden_apis = _hidden_apis(r, fields["hide_apis"])
    if "reencode" in fields:
        policy.reencode = {k: v for k, v, _ in r.api_versions(fields["reencode"], "reencode", False)}
    if "allow_drop" in fields:
        policy.allow_drop = frozenset(
            r.string(n, f"allow_drop[{i}]")
            for i, n in enumerate(r.sequence(fields["allow_drop"], "allow_drop"))
        )
    if "membership" in fields:
        policy.membership = tuple(
            _membership_edit(r, n, f"membership[{i}]")
            for i, n in enumerate(r.sequence(fields["membership"], "membership"))
        )
    return policy


def load_policy(path: str | Path) -> RewritePolicy:
    return parse_policy(read_text(path, PolicyError), str(path))


__all__ = ["MembershipEdit", "PolicyError", "RewritePolicy", "load_policy", "parse_policy"]
