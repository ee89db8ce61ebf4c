"""README.md and docs/ link only to what the repository has; the README stays a landing page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 220

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
PARENT_PATH = re.compile(r"(?<![\w/.])(?:\.\./)+[\w./-]*")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation but - and _ dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    """Every link target of a page that is not a URL (relative paths and #anchors)."""
    targets = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not SCHEME.match(target):
                targets.append(target)
    return targets


def _cases() -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), t) for p in PAGES for t in relative_links(p)]


def test_pages_have_links() -> None:
    """The scan finds links at all (a broken pattern would pass every page)."""
    assert any(t for _, t in _cases())


@pytest.mark.parametrize(("page", "target"), _cases())
def test_relative_link_resolves(page: str, target: str) -> None:
    """A relative link names a file (or folder) of the repository, and its #anchor a heading."""
    path_part, _, anchor = target.partition("#")
    source = ROOT / page
    dest = (source.parent / path_part).resolve() if path_part else source
    assert dest.exists(), f"{page} links {target}: no such file"
    assert dest == ROOT or ROOT in dest.parents, f"{page} links {target}: outside the repository"
    if anchor and dest.suffix == ".md":
        assert anchor in anchors(dest), f"{page} links {target}: no heading with that anchor"


def test_no_page_points_outside_the_repository() -> None:
    """No page names a file outside the repository, even as plain text (`../shared/DESIGN.md`)."""
    outside = []
    for page in PAGES:
        for mention in PARENT_PATH.findall(page.read_text(encoding="utf-8")):
            dest = (page.parent / mention).resolve()
            if ROOT not in dest.parents:
                outside.append(f"{page.relative_to(ROOT)}: {mention}")
    assert not outside, outside


def test_slug_follows_github() -> None:
    """Anchors are made as GitHub makes them."""
    assert slug("Who may write the coordination topic") == "who-may-write-the-coordination-topic"
    assert slug("Pausing a group: `marshal-admin release-group`") == (
        "pausing-a-group-marshal-admin-release-group"
    )
    assert slug("Settings a group must share: `group_settings`") == (
        "settings-a-group-must-share-group_settings"
    )


def test_readme_is_a_landing_page() -> None:
    """README.md stays short: the rest lives in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


# Where the package and its files point a reader: --help texts, error messages, docstrings.
CODE = sorted({*(ROOT / "marshal_workers").rglob("*.py"), *(ROOT / "plugins").glob("*.py")})
NAMED_PAGE = re.compile(r"(?<![\w/.-])((?:docs|systemd)/[\w.-]+\.(?:md|png))(?:#([\w-]+))?")
NAMED_SECTION = re.compile(r"(?<![\w/.-])(docs/[\w.-]+\.md),\s+(['\"])(.+?)\2")
BARE_README = re.compile(r"\bREADME\b(?!\.md)")


def _code_strings(path: Path) -> list[str]:
    """Every string literal of a module, each implicitly concatenated one whole (a message
    split over lines is one string here), f-strings by their literal parts."""
    import ast  # noqa: PLC0415

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            found.append("".join(
                v.value for v in node.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str)
            ))  # fmt: skip
    return found


def _named_in_code() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), text)
        for path in CODE
        for text in _code_strings(path)
        if any(word in text for word in ("docs/", "README", "systemd/", "DESIGN", "../"))
    ]


def test_the_code_names_pages() -> None:
    """The scan below finds the pages the code names at all (a broken pattern passes all)."""
    assert sum(bool(NAMED_PAGE.search(t)) for _, t in _named_in_code()) > 10
    assert any(NAMED_SECTION.search(t) for _, t in _named_in_code())


def test_every_page_and_section_the_code_names_exists() -> None:
    """A --help text, an error message or a docstring that sends a reader to a page names a
    file of the repository (``docs/X.md``, ``systemd/README.md``, never a bare "README": its
    sections moved to docs/; never a file outside it, like ``../shared/DESIGN.md``), and a
    section it quotes (``docs/X.md, 'Heading'``) is a heading of that page."""
    wrong = []
    for where, text in _named_in_code():
        for page, anchor in NAMED_PAGE.findall(text):
            if not (ROOT / page).exists():
                wrong.append(f"{where}: {page}: no such file")
            elif anchor and anchor not in anchors(ROOT / page):
                wrong.append(f"{where}: {page}#{anchor}: no such heading")
        for page, _, section in NAMED_SECTION.findall(text):
            headings = (
                {h.lower() for h in _headings(ROOT / page)} if (ROOT / page).exists() else set()
            )
            if section.lower() not in headings:
                wrong.append(f"{where}: {page}, {section!r}: no such heading")
        if BARE_README.search(text.replace("systemd/README.md", "")):
            wrong.append(f"{where}: names a README without its path: {text[:80]!r}")
        if "DESIGN.md" in text or PARENT_PATH.search(text):
            wrong.append(f"{where}: names a file outside the repository: {text[:80]!r}")
    assert not wrong, wrong


def _headings(page: Path) -> list[str]:
    """The text of every heading of a page, markup dropped."""
    return [
        m.group(2).replace("`", "")
        for line in _prose_lines(page.read_text(encoding="utf-8"))
        if (m := HEADING.match(line))
    ]
