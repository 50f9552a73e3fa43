"""The guides in docs/ stay true: the configuration reference matches the settings table, and links resolve."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from pgbus_flask.config import KEYS


def project_root() -> Path:
    """The folder holding pyproject.toml, wherever this test file sits below it."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    raise AssertionError("no pyproject.toml above " + __file__)


ROOT = project_root()


def generator() -> ModuleType:
    """docs/make_configuration.py, loaded as a module (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("make_configuration", ROOT / "docs" / "make_configuration.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def configuration() -> str:
    return (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_configuration_documents_every_setting() -> None:
    text = configuration()
    missing = [key.name for key in KEYS if f"`{key.name}`" not in text]
    assert missing == []


def test_configuration_shows_each_key_with_its_default() -> None:
    make = generator()
    rows = dict(re.findall(r"^\| `(PGBUS_[A-Z_]+)` \| (.*?) \| ", configuration(), re.MULTILINE))
    expected = {key.name: make.cell(make.show_default(key.name, key.default)) for key in KEYS}
    assert rows == expected, "run: python docs/make_configuration.py"


def test_configuration_is_what_the_script_writes() -> None:
    assert configuration() == generator().render(), "run: python docs/make_configuration.py"


def test_every_key_sits_in_one_group_of_the_reference() -> None:
    grouped = [name for _title, _text, names in generator().GROUPS for name in names]
    assert sorted(grouped) == sorted(key.name for key in KEYS)


def test_the_shown_defaults_read_as_a_person_writes_them() -> None:
    from datetime import timedelta

    show = generator().show_default
    assert show("PGBUS_DATABASE_URL", None) == "(required)"
    assert show("PGBUS_X", timedelta(minutes=5)) == "5 min (300 s)"
    assert show("PGBUS_X", timedelta(seconds=30)) == "30 s"
    assert show("PGBUS_X", timedelta(days=30)) == "30 days"
    assert show("PGBUS_X", 1_000) == "1,000"
    assert show("PGBUS_X", False) == "false"
    assert show("PGBUS_X", ()) == "none"
    assert show("PGBUS_X", "pgbus") == "`pgbus`"


# -- links ---------------------------------------------------------------------------------------

#: [text](target) outside code; images too. Targets with a scheme (https:, mailto:) are not checked.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "bench").glob("*.md")), *sorted((ROOT / "translations").glob("*/*.md")),
             *sorted((ROOT / "examples").rglob("*.md"))]
    return [path for path in found if path.is_file()]


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of ``text`` (lower case, punctuation dropped, spaces to hyphens;
    a repeated heading gets -1, -2 ...), and any explicit <a id="..."> / <a name="...">."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", text), re.MULTILINE):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = "".join(ch for ch in plain.lower() if ch.isalnum() or ch in " -_").replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    found |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return found


def broken_links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    prose = CODE_SPAN.sub("", FENCE.sub("", text))
    broken = []
    for target in LINK.findall(prose):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target} (no such heading)")
    return broken


def test_links_in_the_readme_and_the_guides_resolve() -> None:
    broken = {str(path.relative_to(ROOT)): found for path in markdown_files() if (found := broken_links(path))}
    assert broken == {}


def test_the_link_check_sees_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading) [ok2](other.md#twice-1) [gone](missing.md) [bad](other.md#nope)"
                    " [web](https://example.com/x) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n",
                    encoding="utf-8")
    assert broken_links(page) == ["missing.md (no such file)", "other.md#nope (no such heading)"]


def test_no_file_cites_a_design_document_the_repository_does_not_hold() -> None:
    """The project's design notes are docs/architecture.md and docs/decisions.md; bench.house counts the rest."""
    from bench.house import design_citations

    assert design_citations() == []


def test_the_readme_python_examples_compile() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks, "README.md shows a Python example"
    for number, block in enumerate(blocks):
        compile(block, f"README.md, Python block {number + 1}", "exec")
