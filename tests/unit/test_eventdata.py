"""The events' types (brokerbench/eventdata.py): they agree with schemas/events.schema.json (the PROVEN ones rule by
rule, ranges included, since a write checks them by the Struct alone), a write refuses what they do not declare, a read of a malformed stored event names the event and the field, and every event stored by the
earlier releases (the archived real runs) decodes through them."""

import json
from pathlib import Path
from typing import Literal

import msgspec
import pytest
from archives import archives, read_archive
from event_examples import failed, one_of_each, trigger
from msgspec import UNSET, UnsetType, inspect

from brokerbench import eventdata
from brokerbench.events import InvalidEvent, _validators, decode_data, make_event, new_run_id, validate
from brokerbench.events.memory import MemoryEventStore
from brokerbench.paths import SCHEMAS_DIR

SCHEMA = json.loads((SCHEMAS_DIR / "events.schema.json").read_text())
REPO = Path(__file__).resolve().parents[2]
ANY = frozenset({"string", "integer", "number", "boolean", "null", "object", "array"})


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        target = SCHEMA
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k not in ("$ref", "description")}}
    if "anyOf" in node:  # a shape or null: the object's node, admitting the kinds of every option
        options = [_resolve(option) for option in node["anyOf"]]
        kinds = sorted(set().union(*(_schema_kinds(option) for option in options)))
        shaped = next((o for o in options if "properties" in o), {})
        node = {**shaped, **{k: v for k, v in node.items() if k not in ("anyOf", "description")}, "type": kinds}
    return node


def _json_kind(value) -> str:
    return {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}[type(value)]


def _schema_kinds(node: dict) -> frozenset:
    """The JSON kinds a schema node admits ('number' admits integers too)."""
    node = _resolve(node)
    if "enum" in node or "const" in node:
        kinds = {_json_kind(v) for v in node.get("enum", [node.get("const")])}
    elif "type" in node:
        kinds = set(node["type"] if isinstance(node["type"], list) else [node["type"]])
    else:
        return ANY
    return frozenset(kinds | ({"integer"} if "number" in kinds else set()))


def _members(info) -> list:
    """A field type's members: the union's (msgspec leaves UNSET out)."""
    members = info.types if isinstance(info, inspect.UnionType) else (info,)
    return list(members)


def _type_kinds(info) -> frozenset:
    kinds = set()
    for m in _members(info):
        if isinstance(m, inspect.AnyType):
            return ANY
        if isinstance(m, inspect.LiteralType):
            kinds |= {_json_kind(v) for v in m.values}
        else:
            kinds |= {inspect.IntType: {"integer"}, inspect.FloatType: {"number", "integer"}, inspect.StrType: {"string"},
                      inspect.BoolType: {"boolean"}, inspect.NoneType: {"null"}, inspect.DictType: {"object"},
                      inspect.StructType: {"object"}, inspect.ListType: {"array"}}[type(m)]
    return frozenset(kinds)


def _disagreements(node: dict, info, where: str) -> list[str]:
    """Where a Struct field's type (msgspec.inspect) and the schema node of the same property differ."""
    node = _resolve(node)
    found = []
    if _schema_kinds(node) != _type_kinds(info):
        found.append(f"{where}: the schema admits {sorted(_schema_kinds(node))}, the Struct "
                     f"{sorted(_type_kinds(info))}")
    members = _members(info)
    if "enum" in node:
        literal = {v for m in members if isinstance(m, inspect.LiteralType) for v in m.values}
        literal |= {None} if any(isinstance(m, inspect.NoneType) for m in members) else set()
        if literal != set(node["enum"]):
            found.append(f"{where}: enum {node['enum']} against {sorted(literal, key=str)}")
    for m in members:
        if isinstance(m, inspect.StructType):
            found += _object_disagreements(node, m, where)
        elif isinstance(m, inspect.ListType) and "items" in node:
            found += _disagreements(node["items"], m.item_type, f"{where}[]")
        elif isinstance(m, inspect.DictType) and isinstance(node.get("additionalProperties"), dict):
            found += _disagreements(node["additionalProperties"], m.value_type, f"{where}.*")
    return found


def _object_disagreements(node: dict, struct: inspect.StructType, where: str) -> list[str]:
    node = _resolve(node)
    properties, required = node.get("properties", {}), set(node.get("required", []))
    fields = {f.encode_name: f for f in struct.fields}
    found = [f"{where}.{name}: in the schema, not a field of {struct.cls.__name__}"
             for name in (properties.keys() | required) - fields.keys()]
    found += [f"{where}.{name}: a field of {struct.cls.__name__}, not in the schema"
              for name in fields.keys() - properties.keys() - required]
    for name, field in fields.items():
        if field.required != (name in required):
            found.append(f"{where}.{name}: {'required' if name in required else 'optional'} in the schema")
        if name in properties:
            found += _disagreements(properties[name], field.type, f"{where}.{name}")
    closed = node.get("additionalProperties") is False
    if struct.forbid_unknown_fields != closed:
        found.append(f"{where}: additionalProperties {node.get('additionalProperties')!r}, but "
                     f"{struct.cls.__name__} {'forbids' if struct.forbid_unknown_fields else 'allows'} unknown fields")
    if closed and issubclass(struct.cls, eventdata.Open):
        found.append(f"{where}: closed in the schema, Open in eventdata")
    return found


# What a PROVEN type's Struct holds of its schema: the keywords the comparisons above and below read, no other.
HELD = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "description", "$ref",
        "anyOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
        "minItems", "maxItems"}
RANGES = {  # msgspec.inspect's type -> (schema keyword, its constraint)
    inspect.IntType: (("minimum", "ge"), ("maximum", "le"), ("exclusiveMinimum", "gt"), ("exclusiveMaximum", "lt")),
    inspect.FloatType: (("minimum", "ge"), ("maximum", "le"), ("exclusiveMinimum", "gt"), ("exclusiveMaximum", "lt")),
    inspect.StrType: (("minLength", "min_length"), ("maxLength", "max_length"), ("pattern", "pattern")),
    inspect.ListType: (("minItems", "min_length"), ("maxItems", "max_length")),
}


def _rule_disagreements(node: dict, info, where: str) -> list[str]:
    """Where a field's ranges (and an Open object's other fields, eventdata.OPEN_VALUES) differ from the schema's,
    or the schema has a rule the Struct cannot hold."""
    node = _resolve(node)
    found = [f"{where}: the schema's {key!r}, which the Struct does not hold" for key in node.keys() - HELD]
    for m in _members(info):
        for keyword, constraint in RANGES.get(type(m), ()):
            if node.get(keyword) != getattr(m, constraint):
                found.append(f"{where}: {keyword} {node.get(keyword)!r} in the schema, {constraint} "
                             f"{getattr(m, constraint)!r} in the Struct")
        if isinstance(m, inspect.StructType):
            fields = {f.encode_name: f for f in m.fields}
            found += [p for name, sub in node.get("properties", {}).items() if name in fields
                      for p in _rule_disagreements(sub, fields[name].type, f"{where}.{name}")]
            extra = eventdata.OPEN_VALUES.get(m.cls)
            if isinstance(node.get("additionalProperties"), dict):
                found += (_rule_disagreements(node["additionalProperties"], inspect.type_info(extra), f"{where}.*")
                          if extra is not None else [f"{where}.*: typed in the schema, not in OPEN_VALUES"])
        elif isinstance(m, inspect.ListType) and "items" in node:
            found += _rule_disagreements(node["items"], m.item_type, f"{where}[]")
        elif isinstance(m, inspect.DictType) and isinstance(node.get("additionalProperties"), dict):
            found += _rule_disagreements(node["additionalProperties"], m.value_type, f"{where}.*")
    return found


@pytest.mark.parametrize("event_type", sorted(eventdata.PROVEN))
def test_a_proven_struct_holds_every_rule_of_its_schema(event_type):
    """The write checks a PROVEN type's data by its Struct alone (events.validate): the Struct must hold each range,
    pattern and length of its schema entry, and the entry no rule the Struct cannot hold."""
    struct = inspect.type_info(eventdata.EVENT_TYPES[event_type])
    assert _rule_disagreements(SCHEMA["$defs"][event_type], struct, "data") == []


def test_the_rule_check_finds_a_range_the_struct_lacks():
    """The check above can fail: IntervalMeasured's Struct with its interval's minimum dropped and the counters'
    other fields untyped is found on both counts; so is an event type whose schema has rules its Struct lacks."""
    class Loose(eventdata.IntervalMeasured, kw_only=True, forbid_unknown_fields=True):
        interval: int

    found = _rule_disagreements(SCHEMA["$defs"]["IntervalMeasured"], inspect.type_info(Loose), "data")
    assert found == ["data.interval: minimum 0 in the schema, ge None in the Struct"]
    counters = SCHEMA["$defs"]["counters"]
    assert _rule_disagreements(counters, inspect.type_info(eventdata.Counters), "c") == []
    assert eventdata.OPEN_VALUES.pop(eventdata.Counters)
    try:
        assert _rule_disagreements(counters, inspect.type_info(eventdata.Counters), "c") == [
            "c.*: typed in the schema, not in OPEN_VALUES"]
    finally:
        eventdata.OPEN_VALUES[eventdata.Counters] = eventdata.NonNegativeInt
    assert _rule_disagreements(SCHEMA["$defs"]["CellStarted"], inspect.type_info(eventdata.CellStarted), "data")


HOST = {"cpu_pressure_pct": 1.0, "memory_pressure_pct": 0.0, "steal_pct": 0.0}


@pytest.mark.parametrize("change, field", [
    (lambda d: d["counters"].update(sent=-1), "data.counters.sent: expected `int` >= 0"),
    (lambda d: d["counters"].update(lost=-2), "data.counters.lost: expected `int` >= 0"),
    (lambda d: d["counters"].update(lost="2"), "data.counters.lost: expected `int`, got `str`"),
    (lambda d: d.update(interval=-1), "data.interval: expected `int` >= 0"),
    (lambda d: d.update(backlog=-5), "data.backlog: expected `int` >= 0"),
    (lambda d: d.update(host={**HOST, "cpu_pct": 101.0}), "data.host.cpu_pct: expected `float` <= 100"),
    (lambda d: d.update(host={**HOST, "cpu_pct": 5.0, "cpus": 0}), "data.host.cpus: expected `int` >= 1"),
    (lambda d: d.update(resources={"broker": {"cpu_pct": -1.0, "rss_mb": 1.0}}), "data.resources"),
])
def test_a_malformed_interval_is_refused_by_its_struct_as_by_the_schema(change, field):
    """IntervalMeasured is written checked by its Struct alone (eventdata.PROVEN): what the schema's validator
    refuses, the Struct refuses too, naming the event and the field."""
    event = next(e for e in one_of_each() if e["type"] == "IntervalMeasured")
    event = {**event, "data": json.loads(json.dumps(event["data"]))}
    change(event["data"])
    assert list(_validators()["IntervalMeasured"].iter_errors(event["data"])), "the schema admits it"
    with pytest.raises(InvalidEvent) as refused:
        validate(event)
    assert str(refused.value).startswith(f"IntervalMeasured event {event['event_id']} is invalid: {field}"), (
        str(refused.value))


def test_every_event_type_of_the_schema_has_its_struct_and_no_other():
    assert list(eventdata.EVENT_TYPES) == [t for t in SCHEMA["properties"]["type"]["enum"]]
    assert eventdata.SCHEMA_VERSION == SCHEMA["properties"]["schema_version"]["const"]


@pytest.mark.parametrize("event_type", SCHEMA["properties"]["type"]["enum"])
def test_each_struct_agrees_with_its_schema_field_by_field(event_type):
    struct = inspect.type_info(eventdata.EVENT_TYPES[event_type])
    assert _object_disagreements(SCHEMA["$defs"][event_type], struct, "data") == []


def test_the_agreement_check_finds_a_missing_field_a_wrong_type_and_an_optional_required_one():
    """The check above can fail: a Struct that drops one property, types another wrongly and leaves a required one
    optional is found on each count."""
    class Wrong(eventdata.Data, kw_only=True):
        status: Literal["completed", "failed"]
        reason: int | UnsetType = UNSET
        cells_completed: int | UnsetType = UNSET

    found = _object_disagreements(SCHEMA["$defs"]["RunCompleted"], inspect.type_info(Wrong), "data")
    assert sorted(found) == sorted([
        "data.cells_failed: in the schema, not a field of Wrong",
        "data.status: enum ['completed', 'completed_with_failures', 'interrupted', 'cancelled'] against "
        "['completed', 'failed']",
        "data.reason: the schema admits ['string'], the Struct ['integer']",
        "data.cells_completed: required in the schema"])


def test_a_field_its_type_does_not_declare_is_refused_where_it_is_written():
    run_id = new_run_id()
    with pytest.raises(InvalidEvent, match=r"data\.atempt: not a field of CellFailed's data"):
        make_event(run_id, "CellFailed", {"cell_id": "c", "reason": "r", "atempt": 1}, cell_index=0)
    faults = {"applied": [], "leader_at_end": None, "producer_ack_gap": {"from_s": 1.0, "secs": 2.0}}
    with pytest.raises(InvalidEvent, match=r"data\.faults\.producer_ack_gap\.secs: not a field"):
        make_event(run_id, "CellFailed", {"cell_id": "c", "reason": "r", "faults": faults}, cell_index=0)
    # where the schema leaves an object open (a cell's settings) its other fields are written as they are
    event = next(e for e in one_of_each() if e["type"] == "CellStarted")
    make_event(run_id, "CellStarted", {**event["data"], "cell": {**event["data"]["cell"], "linger_ms": 5}},
               cell_index=0)


def test_a_stored_event_without_a_required_field_names_the_event_and_the_field():
    run_id = new_run_id()
    text = json.dumps({"cell_id": "kafka.json.0", "interval": 3, "attempt": 0, "histograms": {},
                       "counters": {"sent": 1, "bytes_sent": 1, "acked": 1, "send_errors": 0, "received": 1}})
    with pytest.raises(InvalidEvent) as err:
        decode_data(text, event_type="IntervalMeasured", event_id=f"{run_id}/10#c00000#1#a00#i000003", run_id=run_id)
    assert str(err.value) == (f"stored event {run_id}/10#c00000#1#a00#i000003 (IntervalMeasured, run {run_id}) does "
                              "not decode: data.counters: object missing required field `bytes_received`")


def test_a_stored_event_with_a_misspelled_or_mistyped_field_names_it():
    run_id = new_run_id()
    names = {"event_id": f"{run_id}/90#run#end", "run_id": run_id}
    with pytest.raises(InvalidEvent, match=r"data: object missing required field `cells_failed`"):
        decode_data('{"status":"completed","cells_completed":1,"cells_faild":0}', event_type="RunCompleted", **names)
    with pytest.raises(InvalidEvent, match=r"data.cells_failed: expected `int`, got `str`"):
        decode_data('{"status":"completed","cells_completed":1,"cells_failed":"0"}', event_type="RunCompleted",
                    **names)
    with pytest.raises(InvalidEvent, match=r"data.status: invalid enum value 'done'"):
        decode_data('{"status":"done","cells_completed":1,"cells_failed":0}', event_type="RunCompleted", **names)
    # a closed object: an unknown field is refused on read as on write
    with pytest.raises(InvalidEvent, match=r"StepFailed, run .*data: object contains unknown field `steps`"):
        decode_data('{"step":"Notify","reason":"x","steps":1}', event_type="StepFailed", **names)


def _archived(event_type: str, has: str) -> dict:
    """The first archived event of `event_type` whose data has `has`."""
    return next(e for path in ARCHIVED for e in read_archive(path) if e["type"] == event_type and has in e["data"])


def test_the_verdicts_inputs_are_typed_closed_and_named_when_wrong():
    """A cell's verdict, its warm-up and a rate search's record are Structs that refuse an unknown field, on write
    and on read; the run's spec and environment are open, with the fields the reports read typed."""
    hints = {t: msgspec.structs.fields(t) for t in (eventdata.CellCompleted, eventdata.CellFailed)}
    for data_type, fields in hints.items():
        typed = {f.name: f.type for f in fields}
        assert typed["warmup"] == eventdata.Warmup | UnsetType and typed["search"] == eventdata.Search | UnsetType
    assert {f.name: f.type for f in hints[eventdata.CellCompleted]}["verdict"] == eventdata.CellVerdict | UnsetType
    for closed in (eventdata.CellVerdict, eventdata.Warmup, eventdata.Search, eventdata.SearchStep,
                   eventdata.LatencyAt, eventdata.Dispute):
        assert inspect.type_info(closed).forbid_unknown_fields, closed
    assert not inspect.type_info(eventdata.Spec).forbid_unknown_fields
    assert not inspect.type_info(eventdata.Environment).forbid_unknown_fields

    searched = _archived("CellCompleted", "search")
    record = msgspec.convert(searched["data"]["search"], eventdata.Search)
    assert record.max_sustainable_rate == 118885 and record.probe.rate == "max"
    assert [s.verdict for s in record.steps] == ["unsustainable", "sustainable", "unsustainable", "sustainable",
                                                 "sustainable"]
    requested = msgspec.convert(_archived("RunRequested", "environment")["data"], eventdata.RunRequested)
    assert requested.environment.host.cores == 2 and requested.spec.name

    run_id = new_run_id()
    data = {**searched["data"], "verdict": {"verdict": "sustainable", "reasons": [], "reason": "typo"}}
    with pytest.raises(InvalidEvent, match=r"CellCompleted .*data\.verdict.*'reason'"):
        make_event(run_id, "CellCompleted", data, cell_index=0)
    steps = [{**searched["data"]["search"]["steps"][0], "throughput": 1.0}]
    with pytest.raises(InvalidEvent, match=r"data\.search\.steps.*'throughput'"):
        make_event(run_id, "CellCompleted", {**searched["data"], "search": {**searched["data"]["search"],
                                                                            "steps": steps}}, cell_index=0)
    names = {"event_type": "CellCompleted", "event_id": f"{run_id}/30#c00000#end", "run_id": run_id}
    warmup = {**searched["data"]["warmup"], "used_s": "0.5"}
    with pytest.raises(InvalidEvent, match=r"CellCompleted, run .*data.warmup.used_s: expected `float`, got `str`"):
        decode_data(json.dumps({**searched["data"], "warmup": warmup}), **names)
    with pytest.raises(InvalidEvent, match=r"data.verdict.verdict: invalid enum value 'fine'"):
        decode_data(json.dumps({**searched["data"], "verdict": {"verdict": "fine", "reasons": []}}), **names)
    with pytest.raises(InvalidEvent, match=r"data.search: object missing required field `ended`"):
        decode_data(json.dumps({**searched["data"], "search": {"max_sustainable_rate": None, "steps": []}}), **names)


def test_histograms_stored_apart_are_checked_as_the_data_is():
    """DynamoDB keeps an interval's histograms in their own attribute: they are decoded through their type too, and
    an interval read with its histograms must have them."""
    run_id = new_run_id()
    names = {"event_type": "IntervalMeasured", "event_id": f"{run_id}/10#c00000#1#a00#i000000", "run_id": run_id}
    text = json.dumps({"cell_id": "c", "interval": 0, "attempt": 0, "counters": dict.fromkeys(
        ["sent", "bytes_sent", "acked", "send_errors", "received", "bytes_received"], 1)})
    data = decode_data(text, histograms_text='{"encode_ns":"HISTFAAAA"}', **names)
    assert data["histograms"] == {"encode_ns": "HISTFAAAA"} and list(data)[-1] == "histograms"
    assert "histograms" not in decode_data(text, histograms=False, **names)
    with pytest.raises(InvalidEvent, match=r"data\.histograms\.encode_ns: expected `str`, got `int`"):
        decode_data(text, histograms_text='{"encode_ns":5}', **names)
    with pytest.raises(InvalidEvent, match=r"data: object missing required field `histograms`"):
        decode_data(text, **names)


def test_a_stored_schema_version_this_release_does_not_know_is_named():
    run_id = new_run_id()
    with pytest.raises(InvalidEvent, match=r"schema_version 2 is not one this release reads \(1\)"):
        decode_data('{"reason":"x"}', event_type="RunFailed", event_id=f"{run_id}/90#run#end", run_id=run_id,
                    version=2)


def test_a_float_python_wrote_as_nan_still_decodes():
    """json.dumps writes NaN, which strict JSON (and msgspec) refuses: such an event decodes as json reads it."""
    run_id = new_run_id()
    data = decode_data('{"cell_id":"c","measured_s":NaN,"encoded_bytes":1,"intervals":0,"totals":{"sent":0,'
                       '"received":0,"lost":0,"duplicated":0,"out_of_order":0,"send_errors":0,"unacked":0,'
                       '"bytes_sent":0,"bytes_received":0},"histograms":{},"attempt":0}',
                       event_type="CellCompleted", event_id=f"{run_id}/10#c00000#2#end", run_id=run_id)
    assert data["measured_s"] != data["measured_s"]


def test_every_type_reads_back_from_the_memory_store_as_written():
    """The dicts the rest of the code reads are unchanged by the typed decode: equal to what was written, key order
    included."""
    events = [*one_of_each(), failed(new_run_id()), trigger()]
    store = MemoryEventStore(events)
    for event in events:
        (back,) = [e for e in store.read(event["run_id"], prefix=event["sk"]) if e["sk"] == event["sk"]]
        assert json.dumps(back) == json.dumps(event)
        assert msgspec.convert(back["data"], eventdata.EVENT_TYPES[event["type"]]) == \
            msgspec.convert(event["data"], eventdata.EVENT_TYPES[event["type"]])


ARCHIVED = [p for folder in ("guarantees", "studies") for p in archives(REPO / "docs" / folder).values()]


def test_every_archived_run_is_there():
    assert len(ARCHIVED) == 21


@pytest.mark.parametrize("path", ARCHIVED, ids=lambda p: p.name.removesuffix(".jsonl.gz"))
def test_every_event_of_the_archived_real_runs_decodes_through_its_type(path):
    """Events that earlier releases stored (faults applied, rate searches, backlogs, bursts) decode unchanged."""
    events = read_archive(path)
    for event in events:
        data = decode_data(json.dumps(event["data"]), event_type=event["type"], event_id=event["event_id"],
                           run_id=event["run_id"], version=event["schema_version"])
        assert data == event["data"]
    assert MemoryEventStore(events).read(events[0]["run_id"]) == events
