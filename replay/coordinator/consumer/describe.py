"""ConsumerGroupDescribe over the coordinator's groups (GroupMetadataManager.consumerGroupDescribe)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer.group import ConsumerGroupMember
from replay.coordinator.consumer.types import DescribedGroup, DescribedMember

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator


def describe_groups(coordinator: ConsumerGroupCoordinator, group_ids: Iterable[str]) -> list[DescribedGroup]:
    """GroupMetadataManager.consumerGroupDescribe / ConsumerGroup.asDescribedGroup."""
    described = []
    for group_id in group_ids:
        group = coordinator.groups.get(group_id)
        if group is None:
            described.append(
                DescribedGroup(
                    group_id,
                    int(ErrorCode.group_id_not_found),
                    f"Group {group_id} not found.",  # no state: Kafka sets none
                )
            )
            continue
        members = tuple(
            DescribedMember(
                m.member_id,
                m.instance_id,
                m.rack_id,
                m.member_epoch,
                m.client_id,
                m.client_host,
                tuple(sorted(m.subscribed_topic_names)),
                m.subscribed_topic_regex,
                # asConsumerGroupDescribeMember: the member still answers for what it must revoke
                {
                    t: m.assigned.get(t, frozenset()) | m.pending_revocation.get(t, frozenset())
                    for t in {*m.assigned, *m.pending_revocation}
                }
                if coordinator.config.behaviour.describe_includes_pending_revocation
                else m.assigned,
                group.target.get(m.member_id, {}),
                m.classic is not None,
            )
            for m in group.members.values()
        )
        described.append(
            DescribedGroup(
                group_id,
                0,
                None,
                group.state.value,
                group.group_epoch,
                group.assignment_epoch,
                coordinator._preferred_assignor(group, ConsumerGroupMember(""), ConsumerGroupMember("")),
                members,
            )
        )
    return described


__all__ = ["describe_groups"]
