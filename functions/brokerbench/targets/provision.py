"""The shapes every plug-in's `provision.<broker>` schema shares (its settings.PROVISION): one place for what a
provisioned target is asked for, so that the run-request schema (schema.py joins the plug-ins' blocks) says the same
thing the same way for each broker."""

from __future__ import annotations


def provision_schema(version: str, **properties: dict) -> dict:
    """A plug-in's provision block: `version` (what the version means for this broker, locally and in its cloud),
    then the plug-in's own fields; nothing else is allowed, and {} (every default) when it is omitted."""
    return {"type": "object", "additionalProperties": False,
            "properties": {"version": {"description": version, "type": "string"}, **properties}, "default": {}}


def nodes_property(description: str, maximum: int) -> dict:
    """The count of broker nodes (servers) a target is asked for: 1 up to the plug-in's `maximum`."""
    return {"description": description, "type": "integer", "minimum": 1, "maximum": maximum}
