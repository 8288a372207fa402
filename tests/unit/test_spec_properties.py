"""Property-based: any document given as a run request either validates into a run that plans, or is refused
with a SpecError naming every problem at its place; never any other exception.

Documents are a valid request with fields replaced, added or removed at random: values of every JSON type,
nested junk, boundary numbers, each field's own enum values and the values of other fields."""

import copy
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokerbench.plan import plan
from brokerbench.spec import SpecError, request_schema, validate
from reliability_log import tally

BASE = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["json", "raw"],
        "duration_s": 5}
PROPERTIES = request_schema()["properties"]
FIELDS = sorted(PROPERTIES)

scalars = (st.none() | st.booleans() | st.integers(-(10**12), 10**12)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from([0, 1, -1, 0.5, 1e-9, 2**31, 2**63, "max", "sustainable", "kafka", "json", "batch",
                              "", "../../etc/passwd", "\u0000"]))
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8) | st.sampled_from(FIELDS), inner, max_size=4), max_leaves=12)


def _enums(schema: dict) -> list:
    found = list(schema.get("enum", []))
    for key in ("items", "anyOf", "oneOf"):
        part = schema.get(key)
        for sub in (part if isinstance(part, list) else [part] if isinstance(part, dict) else []):
            found += _enums(sub)
    return found


@st.composite
def field_value(draw, field: str):
    schema = PROPERTIES[field]
    plausible = _enums(schema) or [schema.get("default")]
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.sampled_from(plausible))
    if choice == 1:
        return [draw(st.sampled_from(plausible))] if schema.get("type") == "array" else draw(st.sampled_from(plausible))
    if choice == 2:
        return copy.deepcopy(BASE.get(draw(st.sampled_from(list(BASE))), None))
    return draw(junk)


@st.composite
def documents(draw):
    doc = copy.deepcopy(BASE)
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=6, unique=True)):
        doc[field] = draw(field_value(field))
    if draw(st.integers(0, 4)) == 0:  # a required field missing
        doc.pop(draw(st.sampled_from(list(BASE))), None)
    if draw(st.integers(0, 4)) == 0:  # a field the schema does not have
        doc[draw(st.text(min_size=1, max_size=8))] = draw(junk)
    return doc


def _finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_any_document_is_a_run_or_problems_named_at_their_place(doc):
    try:
        spec = validate(copy.deepcopy(doc))
    except SpecError as refused:
        assert refused.problems
        for problem in refused.problems:
            assert isinstance(problem.path, str) and problem.message
            top = problem.path.split(".")[0].split("[")[0]
            assert top in ("", *PROPERTIES, *doc) or top.startswith("--"), problem
        tally("bad-input-specs", "refused, every problem named")
        return
    tally("bad-input-specs", "valid, planned")
    planned = plan(spec)  # a valid request plans: every cell has what a worker needs
    assert planned["cells"] and all(_finite(c["rate"]) for c in planned["cells"] if c["rate"] not in ("max", "sustainable"))
    assert len({c["cell_id"] for c in planned["cells"]}) == len(planned["cells"])


@settings(max_examples=150, deadline=None)
@given(st.one_of(junk, st.lists(junk), st.text()))
def test_anything_that_is_not_an_object_is_refused_as_a_whole(doc):
    if isinstance(doc, dict):
        return
    try:
        validate(doc)
    except SpecError as refused:
        assert refused.problems[0].path == "" and "JSON object" in refused.problems[0].message
    else:
        raise AssertionError(f"{doc!r} was accepted")
