"""The README and docs/*.md hold together: every relative link reaches an existing file, and an `#anchor` a heading
in it (GitHub's anchor rules); every command of the CLI's parser, subcommands such as `local up` included, and every
option on its command's line in docs/cli.md."""

import argparse
import re
from pathlib import Path

import pytest

from brokerbench import cli

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans, where links and headings are read."""
    lines, fence = [], None
    for line in text.splitlines():
        opening = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if opening and (fence is None or opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence)):
            fence = None if fence else opening.group(1)
            lines.append("")
            continue
        lines.append("" if fence else re.sub(r"(`+)(?:(?!\1).)+\1", "``", line))
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lower-cased, punctuation but `-` and `_` dropped, spaces `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen = set(), {}
    fence = None
    for line in page.read_text().splitlines():
        opening = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if opening and (fence is None or opening.group(1)[0] == fence[0]):
            fence = None if fence else opening.group(1)
            continue
        heading = None if fence else HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(words, subparser) for every command: argparse subparsers and, below them, a positional with choices."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,), sub
                yield from commands(sub, prefix + (name,))
        elif not action.option_strings and action.choices and prefix:
            for choice in action.choices:
                yield prefix + (choice,), None


def documented(words: tuple[str, ...], text: str) -> bool:
    """`brokerbench local up`, or `up` among the alternatives of `brokerbench local up | down | status`."""
    head = r"\s+".join(map(re.escape, ("brokerbench",) + words[:-1]))
    alternatives = r"(?:[\w-]+\s*\|\s*)*" + re.escape(words[-1]) + r"(?![\w-])"
    return re.search(head + r"\s+" + alternatives, text) is not None


def test_the_readme_and_every_page_exist():
    assert (REPO / "docs" / "cli.md").is_file()
    assert len(PAGES) > 5


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `second` part: (b)\n\n## Its `second` part: (b)\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#its-second-part-b) [again](other.md#its-second-part-b-1) [here](#page)\n"
                    "[gone](missing.md) [no heading](other.md#nothing) [web](https://example.com/x.md)\n"
                    "```\n[in code](missing-too.md)\n```\n`[inline](missing-three.md)`\n")
    assert broken_links(page) == [f"missing.md: no file {tmp_path / 'missing.md'}",
                                  "other.md#nothing: no heading #nothing in other.md"]


def test_github_anchor_rules():
    assert slug("Harness: is the load generator ever the bottleneck? (`bench/harness.py`, 1 KB raw records)") == \
        "harness-is-the-load-generator-ever-the-bottleneck-benchharnesspy-1-kb-raw-records"
    assert slug("Downard 2017 (`downard`)") == "downard-2017-downard"
    assert slug("Topics per cell (Kafka)") == "topics-per-cell-kafka"
    assert slug("client_settings and [links](x.md)") == "client_settings-and-links"


def test_every_cli_command_is_in_the_cli_page():
    text = (REPO / "docs" / "cli.md").read_text()
    found = list(commands(cli.build_parser()))
    assert ("local", "up") in [words for words, _ in found] and ("run",) in [words for words, _ in found]
    assert [" ".join(words) for words, _ in found if not documented(words, text)] == []


def synopsis(words: tuple[str, ...], text: str) -> str:
    """The lines of the page that name the command (`brokerbench [` for the options before any command)."""
    return "\n".join(line for line in text.splitlines()
                     if (documented(words, line) if words else re.search(r"brokerbench\s+\[", line)))


def test_every_cli_option_is_on_its_command_line_in_the_cli_page():
    text = (REPO / "docs" / "cli.md").read_text()
    parsers = [((), cli.build_parser())] + [(words, sub) for words, sub in commands(cli.build_parser()) if sub]
    missing = [f"{' '.join(words) or '(global)'} {option}" for words, parser in parsers
               for action in parser._actions for option in action.option_strings
               if option.startswith("--") and option != "--help"
               and not re.search(re.escape(option) + r"(?![\w-])", synopsis(words, text))]
    assert missing == []


def test_a_command_missing_from_the_page_is_found():
    text = "brokerbench run [--suite NAME]\nbrokerbench runs\nbrokerbench local up | down [SERVICE ...]\n"
    assert documented(("run",), text) and documented(("local", "down"), text)
    assert not documented(("local", "status"), text)
    assert not documented(("show",), text) and not documented(("run",), "brokerbench runs\n")
    assert synopsis(("run",), text + "brokerbench [--state-dir DIR]\n") == "brokerbench run [--suite NAME]"
    assert synopsis((), text + "brokerbench [--state-dir DIR]\n") == "brokerbench [--state-dir DIR]"
