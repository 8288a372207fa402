"""The events' types (brokerbench/eventdata.py): they agree with schemas/events.schema.json rule by rule, ranges
included, since a write checks an event by its Structs alone; a write refuses what they do not declare, a read of a
malformed stored event names the event and the field, and every event stored by the earlier releases (the archived
real runs) decodes through them."""

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


# What a Struct holds of its schema: the keywords the comparisons above and below read, no other.
# `format` is not among the rules: the schema's validator never asserted it (events._validators has no format
# checker, test_the_schema_validator_asserts_no_format), so `at` and `due_at` are strings to both.
HELD = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "description", "$ref",
        "anyOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
        "minItems", "maxItems", "format", "oneOf"}
RANGES = {  # msgspec.inspect's type -> (schema keyword, its constraint)
    inspect.IntType: (("minimum", "ge"), ("maximum", "le"), ("exclusiveMinimum", "gt"), ("exclusiveMaximum", "lt")),
    inspect.FloatType: (("minimum", "ge"), ("maximum", "le"), ("exclusiveMinimum", "gt"), ("exclusiveMaximum", "lt")),
    inspect.StrType: (("minLength", "min_length"), ("maxLength", "max_length"), ("pattern", "pattern")),
    inspect.ListType: (("minItems", "min_length"), ("maxItems", "max_length")),
}
RANGE_KEYWORDS = {keyword for pairs in RANGES.values() for keyword, _ in pairs}


def _rule_disagreements(node: dict, info, where: str) -> list[str]:
    """Where a field's ranges (and an Open object's other fields, eventdata.OPEN_VALUES) differ from the schema's,
    or the schema has a rule the Struct cannot hold: a keyword this comparison does not read, a range on a field the
    Struct leaves untyped, fields of an object the Struct takes as a plain dict, a oneOf other than the Struct's
    ONE_OF."""
    node = _resolve(node)
    members = _members(info)
    found = [f"{where}: the schema's {key!r}, which the Struct does not hold" for key in node.keys() - HELD]
    ranged = {keyword for m in members for keyword, _ in RANGES.get(type(m), ())}
    found += [f"{where}: the schema's {key!r}, which no type of the Struct's field holds"
              for key in sorted(node.keys() & RANGE_KEYWORDS - ranged)]
    structs = [m for m in members if isinstance(m, inspect.StructType)]
    shaped = [key for key in ("properties", "required") if node.get(key)] + (
        ["additionalProperties"] if node.get("additionalProperties") is False else [])
    if shaped and not structs:
        found.append(f"{where}: the schema's {', '.join(shaped)}, which the Struct's {info!r} does not hold")
    if "oneOf" in node:
        one_of = [tuple(option.get("required", ())) for option in node["oneOf"]]
        if any(option.keys() != {"required"} for option in node["oneOf"]) or not any(
                getattr(m.cls, "ONE_OF", None) == tuple(one_of) for m in structs):
            found.append(f"{where}: oneOf {node['oneOf']!r} in the schema, not the Struct's ONE_OF")
    for m in members:
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
                # a field the schema requires without a property of its own is one of the additional ones
                found += [p for name, field in fields.items() if name not in node.get("properties", {})
                          for p in _rule_disagreements(node["additionalProperties"], field.type, f"{where}.{name}")]
        elif isinstance(m, inspect.ListType) and "items" in node:
            found += _rule_disagreements(node["items"], m.item_type, f"{where}[]")
        elif isinstance(m, inspect.DictType) and isinstance(node.get("additionalProperties"), dict):
            found += _rule_disagreements(node["additionalProperties"], m.value_type, f"{where}.*")
    return found


def _any_of_options(node) -> list:
    """Every anyOf's options in the schema (anywhere in it)."""
    if isinstance(node, dict):
        return [*node.get("anyOf", ()), *(o for value in node.values() for o in _any_of_options(value))]
    return [o for value in node for o in _any_of_options(value)] if isinstance(node, list) else []


def test_the_schema_validator_asserts_no_format_and_every_any_of_is_a_shape_or_null():
    """What the rule comparison takes for granted: `format` was never checked on write, and an anyOf is a shape or
    null (_resolve keeps the shape's rules; a null option has none to lose)."""
    assert all(v.format_checker is None for v in _validators().values())
    assert all(o == {"type": "null"} or "$ref" in o or "properties" in o for o in _any_of_options(SCHEMA))


@pytest.mark.parametrize("event_type", list(eventdata.EVENT_TYPES))
def test_each_struct_holds_every_rule_of_its_schema(event_type):
    """A write checks an event's data by its Struct alone (events.validate): the Struct must hold each range,
    pattern and length of its schema entry, and the entry no rule the Struct cannot hold."""
    struct = inspect.type_info(eventdata.EVENT_TYPES[event_type])
    assert _rule_disagreements(SCHEMA["$defs"][event_type], struct, "data") == []


def test_the_envelope_struct_holds_every_rule_of_the_envelope():
    """The envelope is checked by eventdata.Envelope alone too: its fields, ranges and patterns are the schema's,
    and its PARTITIONS the schema's if/then/else (a schedule's triggers in its partition, other events in a run's)."""
    envelope = {k: v for k, v in SCHEMA.items() if k not in ("$schema", "$id", "title", "$defs", "if", "then", "else")}
    info = inspect.type_info(eventdata.Envelope)
    assert _object_disagreements(envelope, info, "event") == []
    assert _rule_disagreements(envelope, info, "event") == []
    kind, schedule, run = eventdata.Envelope.PARTITIONS
    assert SCHEMA["if"] == {"properties": {"type": {"const": kind}}}
    assert SCHEMA["then"] == {"properties": {"run_id": {"pattern": schedule}}}
    assert SCHEMA["else"] == {"properties": {"run_id": {"pattern": run}}}


def test_the_rule_check_finds_a_range_the_struct_lacks():
    """The check above can fail: IntervalMeasured's Struct with its interval's minimum dropped and the counters'
    other fields untyped is found on both counts; so are a dropped oneOf, an untyped field the schema bounds and a
    Struct that reads as a plain dict what the schema gives fields."""
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

    class NoOneOf(eventdata.RunRequested, kw_only=True):
        ONE_OF = ()

    assert _rule_disagreements(SCHEMA["$defs"]["RunRequested"], inspect.type_info(NoOneOf), "data") == [
        "data: oneOf [{'required': ['cells']}, {'required': ['cell_chunks']}] in the schema, not the Struct's ONE_OF"]

    class Untyped(eventdata.Totals, kw_only=True):
        sent: object

    assert "t.sent: the schema's 'minimum', which no type of the Struct's field holds" in _rule_disagreements(
        SCHEMA["$defs"]["CellCompleted"]["properties"]["totals"], inspect.type_info(Untyped), "t")

    class Plain(eventdata.CellCompleted, kw_only=True, forbid_unknown_fields=True):
        codec_floor_ns: dict | msgspec.UnsetType = msgspec.UNSET

    assert _rule_disagreements(SCHEMA["$defs"]["CellCompleted"], inspect.type_info(Plain), "data") == [
        "data.codec_floor_ns: the schema's properties, required, which the Struct's "
        "DictType(key_type=AnyType(), value_type=AnyType(), min_length=None, max_length=None) does not hold"]


HOST = {"cpu_pressure_pct": 1.0, "memory_pressure_pct": 0.0, "steal_pct": 0.0}


def _example(event_type: str) -> dict:
    """An event of `event_type` as its producer writes it, its data a copy to change."""
    run_id = new_run_id()
    event = next(e for e in [*one_of_each(run_id), failed(run_id), trigger()] if e["type"] == event_type)
    return {**event, "data": json.loads(json.dumps(event["data"]))}


def _limit(d: dict, **change) -> None:
    d["limit"] = {"by": "client", **change}


MALFORMED = [  # (event type, a change of its data, what the refusal names)
    ("IntervalMeasured", lambda d: d["counters"].update(sent=-1), "data.counters.sent: expected `int` >= 0"),
    ("IntervalMeasured", lambda d: d["counters"].update(lost=-2), "data.counters.lost: expected `int` >= 0"),
    ("IntervalMeasured", lambda d: d["counters"].update(lost="2"), "data.counters.lost: expected `int`, got `str`"),
    ("IntervalMeasured", lambda d: d.update(interval=-1), "data.interval: expected `int` >= 0"),
    ("IntervalMeasured", lambda d: d.update(backlog=-5), "data.backlog: expected `int` >= 0"),
    ("IntervalMeasured", lambda d: d.update(host={**HOST, "cpu_pct": 101.0}),
     "data.host.cpu_pct: expected `float` <= 100"),
    ("IntervalMeasured", lambda d: d.update(host={**HOST, "cpu_pct": 5.0, "cpus": 0}),
     "data.host.cpus: expected `int` >= 1"),
    ("IntervalMeasured", lambda d: d.update(resources={"broker": {"cpu_pct": -1.0, "rss_mb": 1.0}}), "data.resources"),
    ("RunRequested", lambda d: d.update(cell_chunks=2), "data: exactly one of cells and cell_chunks is given, not 2"),
    ("RunRequested", lambda d: d.pop("cells"), "data: exactly one of cells and cell_chunks is given, not 0"),
    ("RunRequested", lambda d: d.update(cell_count=-1), "data.cell_count: expected `int` >= 0"),
    ("RunRequested", lambda d: d["cells"][0].update(index=-1), "data.cells[0].index: expected `int` >= 0"),
    ("CellsPlanned", lambda d: d.update(cells=[]), "data.cells: expected `array` of length >= 1"),
    ("CellsPlanned", lambda d: d.update(chunk=-1), "data.chunk: expected `int` >= 0"),
    ("CellStarted", lambda d: d.update(attempt=-1), "data.attempt: expected `int` >= 0"),
    ("CellStarted", lambda d: d["cell"].update(order=-3), "data.cell.order: expected `int` >= 0"),
    ("CellCompleted", lambda d: d.update(measured_s=0.0), "data.measured_s: expected `float` > 0"),
    ("CellCompleted", lambda d: d.update(sender="native-java"), "data.sender: expected `str` matching regex"),
    ("CellCompleted", lambda d: d["totals"].update(lost=-1), "data.totals.lost: expected `int` >= 0"),
    ("CellCompleted", lambda d: d["totals"].update(late=-4), "data.totals.late: expected `int` >= 0"),
    ("CellCompleted", lambda d: d["totals"].update(late="4"), "data.totals.late: expected `int | null`, got `str`"),
    ("CellCompleted", lambda d: _limit(d, window=0), "data.limit.window: expected `int` >= 1"),
    ("CellCompleted", lambda d: d.update(codec_floor_ns={"encode_ns": 1.0, "decode_ns": 1.0, "calls": 0}),
     "data.codec_floor_ns.calls: expected `int` >= 1"),
    ("CellFailed", lambda d: d.update(reason=""), "data.reason: expected `str` of length >= 1"),
    ("CellFailed", lambda d: d["faults"]["applied"][0].update(fault=-1),
     "data.faults.applied[0].fault: expected `int` >= 0"),
    ("CellFailed", lambda d: d["faults"]["producer_ack_gap"].update(s=-0.5),
     "data.faults.producer_ack_gap.s: expected `float` >= 0"),
    ("RunCompleted", lambda d: d.update(cells_failed=-1), "data.cells_failed: expected `int` >= 0"),
    ("RunFailed", lambda d: d.update(reason=""), "data.reason: expected `str` of length >= 1"),
    ("StepFailed", lambda d: d.update(targets_left=[]), "data.targets_left: expected `array` of length >= 1"),
    ("StepFailed", lambda d: d["targets_left"][0].update(broker=""),
     "data.targets_left[0].broker: expected `str` of length >= 1"),
    ("Notified", lambda d: d.update(message_id=""), "data.message_id: expected `str` of length >= 1"),
    ("ReportBuilt", lambda d: d["files"].update(pdf=3), "data.files[...]: expected `str`, got `int`"),
    ("RegressionDetected", lambda d: d.update(p_value=1.5), "data.p_value: expected `float` <= 1"),
    ("RegressionDetected", lambda d: d["unsustainable_repeats"]["history"].update(runs=0),
     "data.unsustainable_repeats.history.runs: expected `int` >= 1"),
    ("RegressionDetected", lambda d: d.update(runs_before=0), "data.runs_before: expected `int` >= 1"),
    ("ScheduleTriggered", lambda d: d.update(schedule="Nightly"), "data.schedule: expected `str` matching regex"),
    ("ScheduleTriggered", lambda d: d.update(run_id="run-1"), "data.run_id: expected `str` matching regex"),
    ("TargetsReady", lambda d: d.update(targets=[]), "data.targets: expected `object`, got `array`"),
]


@pytest.mark.parametrize("event_type, change, field", MALFORMED,
                         ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(MALFORMED)])
def test_a_malformed_event_is_refused_by_its_struct_as_by_the_schema(event_type, change, field):
    """Every event type is written checked by its Struct alone: what the schema's validator refuses, the Struct
    refuses too, naming the event's id and the field."""
    event = _example(event_type)
    change(event["data"])
    assert list(_validators()[event_type].iter_errors(event["data"])), "the schema admits it"
    with pytest.raises(InvalidEvent) as refused:
        validate(event)
    assert str(refused.value).startswith(f"{event_type} event {event['event_id']} is invalid: {field}"), (
        str(refused.value))


def test_every_event_type_has_a_malformed_case():
    assert {t for t, _, _ in MALFORMED} == set(eventdata.EVENT_TYPES)


@pytest.mark.parametrize("change, field", [
    (lambda e: e.update(bogus=1), "(event): object contains unknown field `bogus`"),
    (lambda e: e.update(sk=""), "sk: expected `str` of length >= 1"),
    (lambda e: e.update(schema_version=2), "schema_version: invalid enum value 2"),
    (lambda e: e.update(type="CellBegan"), "type: invalid enum value 'CellBegan'"),
    (lambda e: e.update(run_id="schedule#nightly"), "(event): run_id 'schedule#nightly' of a RunFailed event does "
                                                    "not match"),
    (lambda e: e.update(run_id="2026"), "run_id: expected `str` matching regex"),
    (lambda e: e.update(data=[]), "data: expected `object`, got `array`"),
])
def test_a_malformed_envelope_is_refused_by_its_struct_as_by_the_schema(change, field):
    event = _example("RunFailed")
    change(event)
    assert list(_validators()["envelope"].iter_errors(event)), "the schema admits it"
    with pytest.raises(InvalidEvent) as refused:
        validate(event)
    assert f"event {event['event_id']} is invalid: {field}" in str(refused.value), str(refused.value)


def test_a_trigger_outside_its_schedules_partition_is_refused():
    event = trigger()
    event["run_id"] = new_run_id()
    assert list(_validators()["envelope"].iter_errors(event)), "the schema admits it"
    with pytest.raises(InvalidEvent, match="of a ScheduleTriggered event does not match '\\^schedule#'"):
        validate(event)


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
    with pytest.raises(InvalidEvent, match=r"CellCompleted .*data\.verdict\.reason: not a field"):
        make_event(run_id, "CellCompleted", data, cell_index=0)
    steps = [{**searched["data"]["search"]["steps"][0], "throughput": 1.0}]
    with pytest.raises(InvalidEvent, match=r"data\.search\.steps\[0\]\.throughput: not a field"):
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
    """json.dumps writes NaN, which strict JSON (and msgspec) refuses: such an event decodes as json reads it (in a
    float the schema gives no range: a range refuses NaN, which compares false to every bound)."""
    run_id = new_run_id()
    data = decode_data('{"cell_id":"c","measured_s":1.5,"delivery_window_start_s":NaN,"encoded_bytes":1,'
                       '"intervals":0,"totals":{"sent":0,"received":0,"lost":0,"duplicated":0,"out_of_order":0,'
                       '"send_errors":0,"unacked":0,"bytes_sent":0,"bytes_received":0},"histograms":{},"attempt":0}',
                       event_type="CellCompleted", event_id=f"{run_id}/10#c00000#2#end", run_id=run_id)
    assert data["delivery_window_start_s"] != data["delivery_window_start_s"]


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
