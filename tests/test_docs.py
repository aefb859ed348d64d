"""The README and docs are checked (issue 15 item 6): code fences balanced, every
`python -m harness <command> --flag` they show exists in that command's --help, every linked
file (and every docs/ path they name) exists, and in-page anchors name a heading."""

from __future__ import annotations

import contextlib
import functools
import io
import re
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "BENCHMARKS.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
COMMAND = re.compile(r"python -m harness ((?:sim calibrate)|[a-z]+)\b(.*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
NAMED_PATH = re.compile(
    r"(?<![\w/.-])((?:docs|scenarios|scripts|benchmarks)/[\w./-]+\.(?:md|json|png|toml|py|sh))"
)


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def unclosed_fence(text: str) -> int | None:
    """The line of a code fence that is never closed, or None."""
    open_fence: str | None = None
    opened_at = 0
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if not m:
            continue
        mark = m.group(1)
        if open_fence is None:
            open_fence, opened_at = mark, n
        elif (
            mark[0] == open_fence[0]
            and len(mark) >= len(open_fence)
            and not line.strip()[len(mark) :].strip()
        ):
            open_fence = None
    return opened_at if open_fence is not None else None


@pytest.mark.parametrize("doc", DOCS, ids=_ids(DOCS))
def test_code_fences_are_balanced(doc):
    line = unclosed_fence(doc.read_text())
    assert line is None, f"{doc.name}:{line}: a code fence opened here is never closed"


@functools.cache
def help_text(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        main([*command.split(), "--help"])
    assert e.value.code == 0, command
    return out.getvalue()


def _commands(text: str) -> list[tuple[int, str, str]]:
    """(line, command, its arguments) for every `python -m harness ...` shown: in code blocks
    (with `\\` continuations and usage lines that go on indented with `[`), and in inline code."""
    out = []
    lines = text.splitlines()
    in_code = False
    for n, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_code = not in_code
            continue
        spans = [line] if in_code else re.findall(r"`([^`]*python -m harness[^`]*)`", line)
        for span in spans:
            m = COMMAND.search(span)
            if not m:
                continue
            args = m.group(2)
            k = n
            while (
                in_code
                and k < len(lines)
                and (args.rstrip().endswith("\\") or re.match(r"^\s+[\[(]", lines[k]))
            ):
                args = args.rstrip().rstrip("\\") + " " + lines[k]
                k += 1
            args = re.split(r"\s#\s", args)[0]  # a comment is not an argument
            out.append((n, m.group(1), args))
    return out


def missing_flags(text: str, name: str = "doc") -> list[str]:
    missing = []
    for n, command, args in _commands(text):
        helptext = help_text(command)
        for flag in FLAG.findall(args):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helptext):
                missing.append(f"{name}:{n}: python -m harness {command} {flag}")
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=_ids(DOCS))
def test_every_flag_shown_exists_in_its_commands_help(doc):
    missing = missing_flags(doc.read_text(), doc.name)
    assert not missing, "flags shown in the docs that the command does not have:\n" + "\n".join(
        missing
    )


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return s.replace(" ", "-")


def broken_links(text: str, base: Path) -> list[str]:
    headings = {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        if not path:
            if anchor not in headings:
                broken.append(f"#{anchor} (no such heading)")
            continue
        if not (base / path).exists():
            broken.append(target)
    for named in NAMED_PATH.findall(text):
        if not (ROOT / named).exists() and not (base / named).exists():
            broken.append(named)
    return sorted(set(broken))


@pytest.mark.parametrize("doc", DOCS, ids=_ids(DOCS))
def test_every_link_and_named_file_exists(doc):
    broken = broken_links(doc.read_text(), doc.parent)
    assert not broken, f"{doc.relative_to(ROOT)}: missing: {broken}"


# Docs are references, not run logs (issue 46 item 3): each answers its question at the top in
# ~400 lines, and the sittings and runs behind its figures live in docs/history/.
LONG_DOCS = {
    "validation-table.md": "generated: every figure of every published point, one row each",
}


def test_docs_are_references_not_run_logs():
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 300, f"README.md: {len(readme)} lines; move detail to docs/"
    long = {
        doc.name: n
        for doc in (ROOT / "docs").glob("*.md")
        if (n := len(doc.read_text().splitlines())) > 420 and doc.name not in LONG_DOCS
    }
    assert not long, f"docs over ~400 lines (history goes to docs/history/): {long}"
    bench = (ROOT / "BENCHMARKS.md").read_text()
    top = bench[: bench.index("\n## ")] if "\n## " in bench else bench
    assert "| figure | measured" in top, "BENCHMARKS.md opens with the table of standing figures"
    assert "docs/history/benchmarks-log.md" in top


HISTORY = sorted((ROOT / "docs" / "history").glob("*.md"))


@pytest.mark.parametrize("doc", HISTORY, ids=_ids(HISTORY))
def test_history_links_resolve(doc):
    """docs/history/ keeps sittings and runs verbatim, moved out of the reading path (issue 46):
    their commands are as they were then, so only their links are checked, which the move must
    keep pointing at files that exist."""
    text = doc.read_text()
    assert unclosed_fence(text) is None, doc.name
    broken = broken_links(text, doc.parent)
    assert not broken, f"{doc.relative_to(ROOT)}: missing: {broken}"


def test_the_checks_catch_mistakes():
    assert unclosed_fence("a\n```toml\nx = 1\n```\n\n```\nrun\n") == 6
    assert unclosed_fence("````\n```\n````\n") is None  # a longer fence holds a shorter one
    assert missing_flags(
        "```\npython -m harness run s.toml --seed 1 \\\n    --no-such-flag\n```\n"
    ) == ["doc:2: python -m harness run --no-such-flag"]
    assert missing_flags("Use `python -m harness export r.json --format csv --colour` here.") == [
        "doc:1: python -m harness export --colour"
    ]
    assert missing_flags("python -m harness run --no-such-flag (prose, not code)") == []
    assert broken_links(
        "[a](docs/nope.md) [b](#top) `docs/live.md` `docs/gone.md`\n# Top\n", ROOT
    ) == ["docs/gone.md", "docs/nope.md"]


def test_the_readme_starts_short():
    """The first screen: what it is, the two commands, the report's picture, the quick run; the
    test command is exactly what .ci/run runs."""
    text = (ROOT / "README.md").read_text()
    first = text[: text.index("\n## ")]
    assert len(first.splitlines()) <= 45
    assert "python -m harness run scenarios/burst.toml" in first
    assert "pip install -e '.[test]' && python -m pytest\n" in first
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("python -m pytest")
    assert "](docs/img/report.png)" in first
    assert (
        "python -m harness run --rate 8 --num-requests 200 --input-len 512 --output-len 128"
        in first
    )
    assert "taotoken" not in first.lower()  # no one gateway's name on the first screen
