"""cdk-nag (AwsSolutions) acknowledgments, each with the reason it is acceptable here.

cdk-nag 3 reads CDK's own acknowledgments (`Validations.of(construct).acknowledge`), which cover the
construct and everything under it. Findings of wildcard IAM permissions (AwsSolutions-IAM5) are one per
wildcard action or resource, so `allow()` adds a statement and acknowledges exactly the wildcards it
carries, with the reason given beside the grant. Every acknowledgment made through this module is
recorded in ACKNOWLEDGED (the tests check that each has a specific reason).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import Acknowledgment, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct

MIN_REASON = 40  # characters: a reason names the resource and why, it is never just "ok"


@dataclass(frozen=True)
class Acknowledged:
    path: str
    rule: str
    reason: str


ACKNOWLEDGED: list[Acknowledged] = []


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge `rule` (a rule id, or rule[finding]) on the construct and everything under it."""
    if len(reason) < MIN_REASON:
        raise ValueError(f"acknowledging {rule} on {construct.node.path}: give a specific reason, not {reason!r}")
    for i, earlier in enumerate(ACKNOWLEDGED):  # the same finding from a second grant: both reasons stand
        if earlier.path == construct.node.path and earlier.rule == rule:
            if reason in earlier.reason:
                return
            reason = f"{earlier.reason}; {reason}"
            ACKNOWLEDGED[i] = Acknowledged(earlier.path, rule, reason)
            Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
            return
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
    ACKNOWLEDGED.append(Acknowledged(construct.node.path, rule, reason))


def flatten(scope: IConstruct, value) -> str:
    """A value as cdk-nag spells it in a finding id: Ref -> <Id>, GetAtt -> <Id.Attr>, Join concatenated."""
    resolved = Stack.of(scope).resolve(value) if Token.is_unresolved(value) else value
    return _flat(resolved)


def _flat(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if fn == "Fn::Join":
            return arg[0].join(_flat(part) for part in arg[1])
        if fn == "Fn::Sub" and isinstance(arg, str):
            return re.sub(r"\$\{([^}]*)\}", r"<\1>", arg)
    raise ValueError(f"cannot spell {value!r} as cdk-nag does")


def allow(principal: iam.IGrantable, actions: list[str], resources: list, *, wildcard_reason: str | None = None,
          conditions: dict | None = None, sid: str | None = None) -> iam.PolicyStatement:
    """Add an Allow statement to the principal's policy; a statement with a wildcard (in an action or a
    resource) must say why, and exactly its wildcards are acknowledged on the principal."""
    statement = iam.PolicyStatement(actions=actions, resources=resources, conditions=conditions, sid=sid)
    principal.grant_principal.add_to_principal_policy(statement)
    wildcards = [f"Action::{a}" for a in actions if "*" in a]
    wildcards += [f"Resource::{flat}" for flat in (flatten(principal.grant_principal, r) for r in resources)
                  if "*" in flat]
    if wildcards and not wildcard_reason:
        raise ValueError(f"{actions} on {resources}: a statement with wildcards needs wildcard_reason")
    owner = principal.grant_principal
    if not hasattr(owner, "node"):
        raise TypeError(f"{owner} is not a construct: acknowledge on its policy instead")
    for wildcard in wildcards:
        acknowledge(owner, f"AwsSolutions-IAM5[{wildcard}]", wildcard_reason)
    return statement
