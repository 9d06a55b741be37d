"""The docs a newcomer reads hold together: every relative link and anchor resolves, every
``SPEC §N`` citation names a section of docs/spec.md, the README stays short, and the
reference pages name every anomaly and metric the gateway has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.projection import anomalies
from gateway.telemetry.metrics import SPEC as METRICS
from gateway.wires import anthropic_rules, responses_rules

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (links and headings there are not Markdown)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in prose(page.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            base = slug(line.lstrip("#"))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(prose(page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not ours to check
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert broken == []


def test_the_readme_is_short_and_maps_every_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 220
    mapped = {Path(t.partition("#")[0]).name for t in links(ROOT / "README.md")
              if t.startswith("docs/")}
    assert {p.name for p in DOCS} <= mapped


def spec_sections() -> set[str]:
    spec = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", spec, re.M)}


def citations() -> list[tuple[str, str]]:
    files = [*PAGES, *(ROOT / "gateway").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "benchmarks").rglob("*.py")]
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"SPEC (§[\d.]+(?:,? §[\d.]+)*)", text):
            for section in re.findall(r"§(\d+(?:\.\d+)*)", match.group(1)):
                found.append((path.relative_to(ROOT).as_posix(), section))
    return found


def test_every_spec_citation_names_a_section_of_docs_spec() -> None:
    cited = citations()
    assert len(cited) > 20  # the walk sees the code's citations
    sections = spec_sections()
    assert {"2", "2.3", "3", "4.4", "6"} <= sections
    assert [(where, s) for where, s in cited if s not in sections] == []


def test_every_anomaly_name_is_documented() -> None:
    page = (ROOT / "docs" / "repair-rules.md").read_text(encoding="utf-8")
    names = [v for module in (anomalies, anthropic_rules, responses_rules)
             for k, v in vars(module).items()
             if k.isupper() and not k.startswith("_")  # (private: block types and such)
             and isinstance(v, str) and re.fullmatch(r"[a-z_]+", v)]
    assert len(names) >= 30
    assert [n for n in names if f"`{n}`" not in page] == []


def test_every_metric_is_documented() -> None:
    page = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    assert [name for name in METRICS if f"`{name}`" not in page] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_repository_path_named_exists(page: Path) -> None:
    named = re.findall(r"`((?:gateway|tests|benchmarks|configs|dashboards)/[\w./-]+)`",
                       page.read_text(encoding="utf-8"))
    assert [p for p in named if not (ROOT / p.rstrip("/")).exists()] == []
