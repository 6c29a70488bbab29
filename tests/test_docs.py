"""The README stays a short front page, every docs page is in the site's navigation, and the site builds strictly
(no broken link or anchor, the generated config reference included)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from rlkit.core.registry import KINDS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_CHARS = 12_000
README_SECTIONS = ["Status", "Install", "First run", "Test", "One example per plugin kind", "Documentation"]
GENERATED = {"config-reference.md"}  # written by docs/hooks/config_reference.py on every build, never committed


def _headings(text: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^##\s+(.+)$", text, re.MULTILINE)]


def _nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def _mkdocs_config() -> dict:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_keeps_its_sections_and_stays_short() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text) < README_MAX_CHARS, f"README.md has {len(text)} characters; move detail to docs/"
    missing = [s for s in README_SECTIONS if s not in _headings(text)]
    assert not missing, f"README.md lacks the sections {missing}"


def test_readme_shows_every_plugin_kind_and_links_every_page() -> None:
    text = README.read_text(encoding="utf-8")
    examples = text.split("## One example per plugin kind", 1)[1].split("\n## ", 1)[0]
    for kind in KINDS:
        assert f"| {kind.key.replace('_', ' ')} |" in examples, f"no README example for the {kind.key} kind"
    for page in sorted(DOCS.glob("*.md")):
        assert f"](docs/{page.name})" in text, f"README.md does not link docs/{page.name}"


def test_readme_test_command_is_what_ci_runs() -> None:
    block = README.read_text(encoding="utf-8").split("## Test", 1)[1]
    command = re.search(r"```bash\n(.+?)\n```", block, re.DOTALL).group(1).strip()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    steps = [step.strip() for step in command.split("&&")]
    assert steps == [line for line in ci if line.strip() in steps], f"{steps} against .ci/run"


def test_every_docs_page_is_in_the_nav() -> None:
    nav = _nav_pages(_mkdocs_config()["nav"])
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages - set(nav) == set(), "docs pages missing from mkdocs.yml's nav"
    assert set(nav) - pages - GENERATED == set(), "nav entries with no page under docs/"
    assert not (GENERATED & pages), "the config reference is generated on build; do not commit docs/config-reference.md"


def test_docs_build_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    reference = site / "config-reference" / "index.html"
    assert reference.is_file()
    assert "Config reference" in reference.read_text(encoding="utf-8")
    assert 'href="config-reference/"' in (site / "index.html").read_text(encoding="utf-8")


def test_the_config_groups_table_lists_every_option_rlkit_ships() -> None:
    """docs/concepts.md's table of config groups against conf/: a group or an option added without the table is
    caught here (the table once listed 4 of 9 estimators)."""
    table = (DOCS / "concepts.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \|", table, re.MULTILINE))
    groups = sorted(p.name for p in (REPO / "conf").iterdir() if p.is_dir() and any(p.glob("*.yaml"))
                    and p.name not in ("hydra", "golden", "rubric_files"))  # rubric_files/: what rubric= options name
    missing = {}
    for group in groups:
        shipped = {p.stem for p in (REPO / "conf" / group).glob("*.yaml")}
        listed = set(re.findall(r"`(\w+)`", rows.get(group, "")))
        if shipped - listed:
            missing[group] = sorted(shipped - listed)
    assert not missing, f"docs/concepts.md's config-group table lacks (group: options): {missing}"
