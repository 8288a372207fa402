"""Run requests as the tests check them: each problem the validator finds, by its field's path."""

from brokerbench.spec import SpecError, validate


def problems(base: dict, **request) -> dict[str, str]:
    """The problems of the run request `base` with `request`'s fields over it, path -> message ({} when valid)."""
    try:
        validate({**base, **request})
    except SpecError as exc:
        return {p.path: p.message for p in exc.problems}
    return {}
