import json

import pytest

from brokerbench import schema, spec
from brokerbench.cli import main

MINIMAL = {"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"]}


def problems_of(doc):
    with pytest.raises(spec.SpecError) as info:
        spec.validate(doc)
    return {p.path: p.message for p in info.value.problems}


def test_defaults_are_filled_from_the_schema():
    full = spec.validate(MINIMAL)
    assert full["size_basis"] == "record" and full["modes"] == ["batch"]
    # Every registered broker's client settings get their defaults (a new plug-in adds its own); settings
    # whose default depends on the target (Kafka's replication factor) stay unset.
    settings = schema.client_settings()
    assert set(full["client"]) == {name for name, setting in settings.items() if "default" in setting}
    assert {"replication_factor", "min_insync_replicas"} <= set(settings) - set(full["client"])
    assert {"acks": "all", "linger_ms": 5, "batch_bytes": 1048576, "compression": "none",
            "pipeline_depth": 100, "read_count": 1000}.items() <= full["client"].items()
    assert (full["producers"], full["consumers"], full["partitions"], full["repeats"]) == (1, 1, 1, 1)


def test_every_problem_is_listed_with_its_path():
    found = problems_of({"brokers": ["kafka", "nats"], "sizes": [10], "rates": [0, "fast"], "formats": [],
                         "client": {"acks": "2"}, "surprise": True})
    assert "'nats' is not one of" in found["brokers[1]"]
    assert "less than the minimum of 64" in found["sizes[0]"]
    assert "0 is not accepted" in found["rates[0]"] and "'max' was expected" in found["rates[1]"]
    assert "formats" in found and "client.acks" in found
    assert "'surprise' was unexpected" in found[""]


def test_missing_required_fields_are_named():
    with pytest.raises(spec.SpecError) as info:
        spec.validate({"brokers": ["kafka"]})
    text = " ".join(p.message for p in info.value.problems)
    for field in ("sizes", "rates", "formats"):
        assert f"'{field}' is a required property" in text


def test_semantic_checks_come_after_the_schema():
    found = problems_of({**MINIMAL, "sizes": [100], "formats": ["json", "raw"], "consumers": 2, "producers": 3, "rates": [2]})
    assert "json needs at least" in found["sizes[0]"] and "raw" not in found["sizes[0]"]
    assert "partitions" in found["consumers"]
    assert "below one message per second per producer" in found["rates[0]"]


def test_wire_basis_minimum_is_each_formats_own():
    spec.validate({**MINIMAL, "sizes": [100], "formats": ["avro", "protobuf"], "size_basis": "wire"})
    with pytest.raises(spec.SpecError):
        spec.validate({**MINIMAL, "sizes": [100], "formats": ["avro"], "size_basis": "record"})


def test_expansion_covers_the_matrix_with_unique_ids():
    full = spec.validate({**MINIMAL, "brokers": ["kafka", "redis-streams"], "sizes": [1024, 4096],
                          "rates": [100, "max"], "formats": ["json", "avro"], "modes": ["batch", "single"], "repeats": 2})
    cells = spec.expand(full)
    assert len(cells) == 2 * 2 * 2 * 2 * 2 * 2
    assert len({c["cell_id"] for c in cells}) == len(cells)
    assert sorted(c["index"] for c in cells) == list(range(len(cells)))  # index: the matrix slot, every one once
    assert [c["order"] for c in cells] == list(range(len(cells)))  # the list is the execution order
    assert [c["repeat"] for c in cells[:32]] == [0] * 32  # repeats outermost, also in execution order
    assert {c["index"] for c in cells[:32]} == set(range(32))
    assert {c["rate"] for c in cells} == {100, "max"}


BIG = {**MINIMAL, "brokers": ["kafka", "redis-streams"], "sizes": [1024, 65536],
       "formats": ["raw", "json", "msgpack", "avro", "protobuf"], "repeats": 3}


def test_a_seed_is_chosen_and_stored_when_none_is_given():
    full = spec.validate(BIG)
    assert full["order"] == "random" and isinstance(full["order_seed"], int)
    assert spec.validate(full) == full  # validating the stored spec again keeps its seed
    seeds = {spec.validate(BIG)["order_seed"] for _ in range(5)}
    assert len(seeds) > 1  # each new request gets its own


def test_the_same_seed_gives_the_same_order_and_repeats_differ():
    first = spec.expand(spec.validate({**BIG, "order_seed": 42}))
    again = spec.expand(spec.validate({**BIG, "order_seed": 42}))
    other = spec.expand(spec.validate({**BIG, "order_seed": 43}))
    ids = lambda cells: [c["cell_id"] for c in cells]  # noqa: E731
    assert ids(first) == ids(again)
    assert ids(first) != ids(other)
    per_repeat = [[c["cell_id"].rsplit(".", 1)[0] for c in first if c["repeat"] == r] for r in range(3)]
    assert len({tuple(p) for p in per_repeat}) == 3  # two repeats run in different orders
    assert all(sorted(p) == sorted(per_repeat[0]) for p in per_repeat)  # ... of the same cells
    assert [c["repeat"] for c in first] == sorted(c["repeat"] for c in first)  # repeat 0 ends before repeat 1
    matrix = [c["cell_id"] for c in sorted(first, key=lambda c: c["index"])]
    assert ids(first) != matrix  # not the matrix order


def test_the_order_is_the_same_in_another_interpreter():
    """A string seed is hashed the same way in every process (no PYTHONHASHSEED dependence)."""
    import subprocess
    import sys

    code = ("from brokerbench import spec; import json; d=json.loads(input()); "
            "print(json.dumps([c['index'] for c in spec.expand(spec.validate(d))]))")
    doc = {**BIG, "order_seed": 7}
    runs = [subprocess.run([sys.executable, "-c", code], input=json.dumps(doc), capture_output=True, text=True,
                           env={"PYTHONHASHSEED": str(h), "PATH": ""}, check=True).stdout for h in (1, 2)]
    assert runs[0] == runs[1] == json.dumps([c["index"] for c in spec.expand(spec.validate(doc))]) + "\n"


def test_fixed_order_is_the_matrix_order():
    cells = spec.expand(spec.validate({**BIG, "order": "fixed"}))
    assert [c["index"] for c in cells] == [c["order"] for c in cells] == list(range(len(cells)))
    assert [c["format"] for c in cells[:5]] == ["raw", "json", "msgpack", "avro", "protobuf"]


def test_position_in_the_order_is_balanced_across_formats():
    """Over many seeds, every format is about as often first in a repeat (no built-in favourite)."""
    first = {}
    for seed in range(400):
        cell = spec.expand(spec.validate({**BIG, "repeats": 1, "order_seed": seed}))[0]
        first[cell["format"]] = first.get(cell["format"], 0) + 1
    assert set(first) == set(BIG["formats"]) and min(first.values()) > 400 / 5 * 0.6


def test_a_random_order_without_a_seed_is_refused_by_expand():
    full = spec.validate(MINIMAL)
    with pytest.raises(ValueError, match="order_seed"):
        spec.expand({**full, "order_seed": None})
    assert spec.expand({k: v for k, v in full.items() if k not in ("order", "order_seed")})  # specs stored before


@pytest.mark.parametrize("name", spec.suite_names())
def test_builtin_suites_are_valid(name):
    assert spec.expand(spec.validate(spec.load_suite(name)))


def test_quick_suite_covers_both_brokers_and_five_formats():
    cells = spec.expand(spec.validate(spec.load_suite("quick")))
    assert {c["broker"] for c in cells} == {"kafka", "redis-streams"}
    assert {c["format"] for c in cells} == {"raw", "json", "msgpack", "avro", "protobuf"}
    # Enough for what it prints: a verdict needs 5 measured seconds, a comparative claim 3 repeats.
    assert all(c["duration_s"] >= 5 and c["repeat"] < 3 for c in cells) and {c["repeat"] for c in cells} == {0, 1, 2}


def test_unknown_suite_lists_the_known_ones():
    with pytest.raises(spec.SpecError, match="quick"):
        spec.load_suite("nope")


def test_cli_rejects_an_invalid_spec_before_starting_anything(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"brokers": ["kafka"], "sizes": [1], "rates": [10], "formats": ["xml"]}))
    state = tmp_path / "state"
    code = main(["--state-dir", str(state), "run", "--spec", str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "sizes[0]" in err and "formats[0]" in err
    assert not state.exists() and not (tmp_path / "out").exists()  # nothing was started or written


def test_cli_validate_reports_json_errors(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main(["validate", "--spec", str(broken)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["validate", "--suite", "quick"]) == 0
