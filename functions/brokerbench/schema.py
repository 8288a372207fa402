"""The run-request schema's broker and format parts, generated from the broker and codec registries.

schemas/run-request.schema.json stays the document people read and validation uses; `generated()`
is that file with its broker list, targets, provision, client settings, modes, partitions and
formats taken from the registries (`brokerbench schema --write` rewrites it; a test fails when the
two differ), and size_rates' pair copied from sizes and rates. Everything else in the file is kept as written.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from .registry import families, plugins
from .codecs import FORMATS
from .paths import SCHEMAS_DIR

REQUEST_SCHEMA = SCHEMAS_DIR / "run-request.schema.json"
# A broker's row name: a registered broker's or a named target's (it becomes part of cell ids and topic names).
BROKER_NAME = "^[a-z][a-z0-9-]{0,31}$"
CORE_PROVISION = ("timeout_s", "poll_s")  # provision's own fields; the rest are per broker


def checked_in() -> dict:
    return json.loads(REQUEST_SCHEMA.read_text())


def broker_names() -> dict:
    return {"anyOf": [
        {"description": "a registered broker (`brokerbench brokers`)", "enum": list(plugins())},
        {"description": "the name of a target in targets with a driver", "type": "string", "pattern": BROKER_NAME},
    ]}


def named_target() -> dict:
    """targets.<name> for any other name: an endpoint served by the driver of one wire-protocol family."""
    shapes = []
    for family, plugin in families().items():
        shape = copy.deepcopy(plugin.settings.target)
        shape["required"] = ["driver", *shape.get("required", [])]
        shape["properties"] = {"driver": {"const": family}, **shape["properties"]}
        shapes.append({"if": {"properties": {"driver": {"const": family}}, "required": ["driver"]}, "then": shape})
    return {
        "description": "A named target: an existing endpoint that speaks one family's protocol (driver), benchmarked "
                       "as its own row under this name (list the name in brokers); "
                       + "; ".join(f"driver {family}: the {plugin.name} driver" for family, plugin in families().items())
                       + ".",
        "type": "object",
        "required": ["driver"],
        "properties": {"driver": {"enum": list(families())}},
        "allOf": shapes,
    }


def client_settings() -> dict:
    """Every broker's client settings in one flat object; two brokers may share a setting only with one meaning."""
    merged: dict = {}
    for plugin in plugins().values():
        for name, setting in plugin.settings.client.items():
            if name in merged and merged[name] != setting:
                raise RuntimeError(f"client setting {name!r} of {plugin.name} differs from another broker's")
            merged[name] = setting
    return merged


def modes() -> list[str]:
    return list(dict.fromkeys(mode for plugin in plugins().values() for mode in plugin.capabilities.modes))


def size_rate_pair(props: dict) -> dict:
    """size_rates' item: one size of `sizes` and its own list of `rates`, defined once (in sizes and rates)."""
    rates = {k: v for k, v in props["rates"].items() if k != "description"}
    return {"size": {"description": "A message size in bytes, as in sizes.", **copy.deepcopy(props["sizes"]["items"])},
            "rates": {"description": "This size's rates, as in rates.", **copy.deepcopy(rates)}}


def generated(base: dict | None = None) -> dict:
    """The run-request schema with its registry-dependent parts generated (from the checked-in file by default)."""
    schema = copy.deepcopy(checked_in() if base is None else base)
    props = schema["properties"]
    props["brokers"]["items"] = broker_names()
    props["formats"]["items"] = {"enum": list(FORMATS)}
    props["modes"]["items"] = {"enum": modes()}
    props["modes"]["description"] = "batch: client batching. single: each send waits for its acknowledgement. " \
        "Per broker: " + "; ".join(
        f"{name} {mode}: {meaning}" for name, plugin in plugins().items()
        for mode, meaning in plugin.capabilities.modes.items()) + "."
    props["partitions"]["description"] = "Partitions per cell: " + "; ".join(
        f"{name}: {plugin.capabilities.partitions}" for name, plugin in plugins().items()) + "."
    props["client"]["properties"] = client_settings()
    props["targets"]["properties"] = {name: p.settings.target for name, p in plugins().items()}
    props["targets"]["propertyNames"] = {"pattern": BROKER_NAME}
    props["targets"]["additionalProperties"] = named_target()
    props["provision"]["properties"] = {
        **{name: p.settings.provision for name, p in plugins().items() if p.settings.provision},
        **{name: props["provision"]["properties"][name] for name in CORE_PROVISION},
    }
    references = props["references"]["properties"]
    references["format"]["enum"] = list(FORMATS)
    props["size_rates"]["items"]["properties"] = size_rate_pair(props)
    references["broker"] = {**{k: v for k, v in references["broker"].items() if k != "enum"}, **broker_names()}
    return schema


def write(path: Path = REQUEST_SCHEMA) -> bool:
    """Rewrite the checked-in schema from the registries; whether it changed."""
    text = json.dumps(generated(json.loads(path.read_text())), indent=2, ensure_ascii=False) + "\n"
    changed = path.read_text() != text
    if changed:
        path.write_text(text)
    return changed
