"""Rubric versions: the changelog's stored hashes are checked on load; `rlkit rubric diff` and `rlkit rubric hash`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

import rlkit
from rlkit.cli import main
from rlkit.core.errors import RubricError
from rlkit.core.rubric import rubric_from_dict
from rlkit.core.rubric_diff import FieldChange, diff_rubrics

REPO_ROOT = Path(__file__).parents[2]

BASE = textwrap.dedent("""\
    name: demo
    version: "1.0"
    changelog:
      - {version: "1.0", date: "2026-11-29", note: First version.}
    dimensions:
      - name: format
        type: binary
        weight: 1.0
        gate: 1
        anchors:
          0: {text: "No number", negative: ["seven"]}
          1: {text: "A number", positive: ["7"]}
        checks:
          - {type: regex, pattern: '^\\d+'}
      - name: brevity
        type: scale
        range: [1, 5]
        weight: 0.5
        anchors:
          1: Long
          5: Short
        checks:
          - {type: length, max: 12, unit: chars}
    """)


def rubric(text: str = BASE, **top: object) -> rlkit.Rubric:
    data = yaml.safe_load(text)
    data.update(top)
    return rubric_from_dict(data, "r.yaml", verify_changelog=False)


def with_hash(data: dict, digest: str, index: int = -1) -> dict:
    data["changelog"][index]["hash"] = digest
    return data


def test_shipped_rubric_stores_the_hash_of_its_current_version() -> None:
    path = REPO_ROOT / "conf" / "rubric_files" / "arithmetic.yaml"
    loaded = rlkit.load_rubric(path)
    entry = next(e for e in loaded.changelog if e.version == loaded.version)
    assert entry.hash == loaded.content_hash


def test_changelog_hash_is_not_part_of_the_content() -> None:
    data = yaml.safe_load(BASE)
    plain = rubric_from_dict(data, "a.yaml")
    stored = rubric_from_dict(with_hash(yaml.safe_load(BASE), plain.content_hash), "b.yaml")
    assert stored.content_hash == plain.content_hash


@pytest.mark.parametrize("digest", ["full", "short"])
def test_matching_hash_loads(digest: str) -> None:
    actual = rubric().content_hash
    data = with_hash(yaml.safe_load(BASE), actual if digest == "full" else actual[:12])
    assert rubric_from_dict(data, "r.yaml").content_hash == actual


def test_changed_content_without_version_bump_is_an_error() -> None:
    stored = rubric().content_hash
    edited = with_hash(yaml.safe_load(BASE.replace("weight: 0.5", "weight: 0.75")), stored)
    with pytest.raises(RubricError) as info:
        rubric_from_dict(edited, "conf/demo.yaml")
    message = str(info.value)
    assert "conf/demo.yaml" in message
    assert "content changed without a version bump" in message
    assert f"version 1.0 stores hash {stored}" in message
    assert "bump `version` and add a changelog entry" in message


def test_bumped_version_with_its_own_entry_loads() -> None:
    stored = rubric().content_hash
    data = yaml.safe_load(BASE.replace("weight: 0.5", "weight: 0.75"))
    data["version"] = "1.1"
    with_hash(data, stored)  # the old entry keeps the old hash: it describes version 1.0
    data["changelog"].append({"version": "1.1", "date": "2026-11-30", "note": "brevity counts more"})
    new = rubric_from_dict(data, "r.yaml")
    assert new.version == "1.1"


@pytest.mark.parametrize("bad", ["abc", "F089CDF08376238F", "not-a-hash-at-all"])
def test_malformed_changelog_hash_names_the_field(bad: str) -> None:
    with pytest.raises(RubricError, match=r"r\.yaml: changelog\[0\]\.hash"):
        rubric_from_dict(with_hash(yaml.safe_load(BASE), bad), "r.yaml")


def test_diff_reports_added_removed_and_each_changed_field() -> None:
    old = rubric()
    new_text = (BASE.replace("weight: 0.5", "weight: 0.75")
                .replace('positive: ["7"]}', 'positive: ["7", "42"]}')
                .replace("max: 12", "max: 10")
                .replace("      5: Short\n", "      3: Medium\n      5: Terse\n"))
    new_text += "  - {name: politeness, range: [1, 3]}\n"
    new = rubric(new_text, version="1.1")
    diff = diff_rubrics(old, new)
    assert diff.added == ["politeness"] and diff.removed == []
    changes = {d.name: {c.field: (c.old, c.new) for c in d.changes} for d in diff.changed}
    assert changes["format"] == {"anchors[1].positive": (["7"], ["7", "42"])}
    brevity = changes["brevity"]
    assert brevity["weight"] == (0.5, 0.75)
    assert brevity["checks[0]"] == ({"type": "length", "max": 12, "unit": "chars"},
                                    {"type": "length", "max": 10, "unit": "chars"})
    assert brevity["anchors[3]"] == (None, "Medium")
    assert brevity["anchors[5].text"] == ("Short", "Terse")
    assert (diff.old_version, diff.new_version) == ("1.0", "1.1")
    assert not diff.unbumped and not diff.same_content


def test_text_only_when_anchors_and_descriptions_alone_differ() -> None:
    old = rubric()
    texts = rubric(BASE.replace('positive: ["7"]}', 'positive: ["7", "42"]}').replace("5: Short", "5: Terse")
                   .replace("type: binary", "type: binary\n    description: A number first"), version="1.1")
    assert diff_rubrics(old, texts).text_only
    assert not diff_rubrics(old, old).text_only  # no difference at all
    assert not diff_rubrics(old, rubric(BASE.replace("max: 12", "max: 10"), version="1.1")).text_only  # a check
    assert not diff_rubrics(old, rubric(BASE.replace("5: Short", "5: Terse").replace("weight: 0.5", "weight: 0.75"),
                                        version="1.1")).text_only  # an anchor and a weight


def test_diff_of_removed_dimension_range_gate_and_order() -> None:
    old = rubric()
    swapped = yaml.safe_load(BASE)
    fmt, brevity = swapped["dimensions"]
    brevity["range"] = [1, 10]
    fmt["gate"] = None
    new = rubric_from_dict({**swapped, "dimensions": [brevity]}, "n.yaml", verify_changelog=False)
    diff = diff_rubrics(old, new)
    assert diff.removed == ["format"]
    (dim,) = diff.changed
    assert FieldChange("range", [1.0, 5.0], [1.0, 10.0]) in dim.changes
    both = yaml.safe_load(BASE)
    both["dimensions"].reverse()
    reordered = diff_rubrics(old, rubric_from_dict(both, "o.yaml", verify_changelog=False))
    assert [c.field for c in reordered.rubric_changes] == ["dimension order"]
    assert reordered.changed == [] and reordered.unbumped


def test_diff_notes_suggest_the_hash_to_store() -> None:
    diff = diff_rubrics(rubric(), rubric())
    assert diff.same_content and not diff.changed
    assert any(f"hash: {diff.new_hash}" in note for note in diff.notes())


def test_diff_notes_a_stale_hash_in_the_new_rubric() -> None:
    old = rubric()
    data = with_hash(yaml.safe_load(BASE.replace("weight: 0.5", "weight: 0.75")), old.content_hash)
    diff = diff_rubrics(old, rubric_from_dict(data, "n.yaml", verify_changelog=False))
    assert diff.unbumped
    assert any("will not load" in note for note in diff.notes())


def test_cli_diff_and_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(BASE)
    new.write_text(BASE.replace("weight: 0.5", "weight: 0.75").replace("version: \"1.0\"\nchangelog",
                                                                        "version: \"1.1\"\nchangelog"))
    assert main(["rubric", "diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "version 1.0" in out and "version 1.1" in out
    assert "brevity" in out and "weight" in out and "0.75" in out
    assert "no entry for version 1.1" in out
    assert main(["rubric", "hash", str(old)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == rlkit.load_rubric(old).content_hash
    assert "hash: " in captured.err
    assert main(["rubric", "diff", str(old)]) == 2


def test_cli_rubric_error_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "stale.yaml"
    data = with_hash(yaml.safe_load(BASE.replace("weight: 0.5", "weight: 0.75")), rubric().content_hash)
    stale.write_text(yaml.safe_dump(data))
    assert main(["validate", f"rubric.path={stale}"]) != 0
    err = capsys.readouterr().err
    assert str(stale) in err and "without a version bump" in err
    # the tools still read it, to show what changed and the hash to store after bumping
    assert main(["rubric", "hash", str(stale)]) == 0
    assert "content changed since" in capsys.readouterr().err
