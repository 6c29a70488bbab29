"""Rubric loading: shipped rubrics, validation errors naming file and field, warnings, content hash."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest

import rlkit
from rlkit.core.rubric import MAX_DIMENSIONS_BEFORE_WARNING, RubricWarning

REPO_ROOT = Path(__file__).parents[2]
SHIPPED_RUBRICS = sorted((REPO_ROOT / "conf" / "rubric_files").rglob("*.yaml"))

VALID = """\
name: demo
version: "1.0"
description: A small rubric.
changelog:
  - version: "1.0"
    date: "2026-11-29"
    note: First version.
dimensions:
  - name: format
    type: binary
    weight: 1.0
    anchors:
      0: {text: "No number"}
      1: {text: "A number"}
    checks:
      - {type: regex, pattern: '^\\d+'}
  - name: brevity
    type: scale
    range: [1, 5]
    weight: 0.5
    anchors:
      1: {text: "Long"}
      5: {text: "Short"}
    checks:
      - {type: length, max: 12, unit: chars}
"""


def write(tmp_path: Path, text: str, name: str = "rubric.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str, name: str = "rubric.yaml") -> rlkit.Rubric:
    return rlkit.load_rubric(write(tmp_path, text, name))


def rubric_yaml(dimensions: str, top: str = "") -> str:
    """A rubric with ``dimensions`` (YAML list items, indented by two spaces) and extra top-level keys."""
    return f'name: t\nversion: "1"\n{top}dimensions:\n{textwrap.dedent(dimensions)}'


def expect_error(tmp_path: Path, text: str, *fragments: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(rlkit.RubricError) as info:
        rlkit.load_rubric(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --- shipped rubrics ---------------------------------------------------------------------------


def test_shipped_rubrics_exist() -> None:
    assert SHIPPED_RUBRICS, "no rubric found under conf/rubric_files"


@pytest.mark.parametrize("path", SHIPPED_RUBRICS, ids=lambda p: p.name)
def test_shipped_rubric_loads(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rubric = rlkit.load_rubric(path)
    assert rubric.name
    assert rubric.version
    assert rubric.dimensions
    assert rubric.source == str(path)
    assert len(rubric.content_hash) == 64
    assert any(w > 0 for w in rubric.initial_weights())


def test_valid_rubric_loads(tmp_path: Path) -> None:
    rubric = load_text(tmp_path, VALID)
    assert rubric.name == "demo"
    assert rubric.dimension_names == ["format", "brevity"]
    assert rubric.initial_weights() == [1.0, 0.5]
    assert rubric.dimensions[1].low == 1.0
    assert rubric.dimensions[1].high == 5.0
    assert rubric.dimensions[0].anchors[1.0].text == "A number"


# --- validation errors -------------------------------------------------------------------------


def test_unknown_top_level_key(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: a, range: [1, 5]}\n", top="colour: blue\n")
    message = expect_error(tmp_path, text, "colour", "unknown key")
    assert "dimensions" not in message.split("unknown key")[0], "the key is the rubric's own, not a dimension's"
    assert "valid keys: name, version" in message


def test_unknown_key_in_dimension(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: first, range: [1, 5]}
          - {name: second, range: [1, 5], the_key: 3}
        """
    )
    expect_error(tmp_path, text, "dimensions[1](second).the_key", "unknown key")


def test_unknown_key_in_first_dimension_shows_index_and_name(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: speed, range: [1, 5], the_key: 3}\n")
    expect_error(tmp_path, text, "dimensions[0](speed).the_key")


def test_anchor_outside_range(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - name: a
            range: [1, 5]
            anchors:
              1: low
              7: too high
        """
    )
    expect_error(tmp_path, text, "dimensions[0](a)", "7", "outside range")


def test_anchor_outside_binary_range(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: ok, type: binary, anchors: {0: nope, 2: what}}\n")
    expect_error(tmp_path, text, "dimensions[0](ok)", "outside range")


def test_negative_weight(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: a, range: [1, 5]}
          - {name: b, range: [1, 5], weight: -0.5}
        """
    )
    expect_error(tmp_path, text, "dimensions[1](b)", "weight", "-0.5")


def test_all_weights_zero(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: a, range: [1, 5], weight: 0}
          - {name: b, type: binary, weight: 0.0}
        """
    )
    expect_error(tmp_path, text, "weights", "0")


def test_some_weights_zero_is_fine(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: a, range: [1, 5], weight: 0}
          - {name: b, type: binary, weight: 0.1}
        """
    )
    assert load_text(tmp_path, text).initial_weights() == [0.0, 0.1]


def test_duplicate_dimension_names(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: same, range: [1, 5]}
          - {name: other, type: binary}
          - {name: same, type: binary}
        """
    )
    message = expect_error(tmp_path, text, "duplicate", "same")
    assert "other" not in message


def test_binary_with_scale_range(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: flag, type: binary, range: [1, 5]}\n")
    expect_error(tmp_path, text, "dimensions[0](flag)", "binary", "[0, 1]")


def test_binary_with_explicit_unit_range_is_fine(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: flag, type: binary, range: [0, 1]}\n")
    assert load_text(tmp_path, text).dimensions[0].range == (0.0, 1.0)


def test_scale_without_range(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: level, type: scale}\n")
    expect_error(tmp_path, text, "dimensions[0](level)", "range")


def test_scale_is_the_default_type_and_needs_range(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: level}\n")
    expect_error(tmp_path, text, "dimensions[0](level)", "range")


@pytest.mark.parametrize("bounds", ["[5, 1]", "[3, 3]"])
def test_range_min_not_below_max(tmp_path: Path, bounds: str) -> None:
    text = rubric_yaml(f"  - {{name: level, range: {bounds}}}\n")
    expect_error(tmp_path, text, "dimensions[0](level)", "min < max")


def test_gate_outside_range(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: level, range: [1, 5], gate: 6}\n")
    expect_error(tmp_path, text, "dimensions[0](level)", "gate", "outside range")


def test_gate_inside_range_is_fine(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: level, range: [1, 5], gate: 5}\n")
    assert load_text(tmp_path, text).dimensions[0].gate == 5.0


def test_condition_on_unknown_dimension(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: format, type: binary}
          - {name: style, range: [1, 5], condition: {dimension: nowhere, min: 1}}
        """
    )
    expect_error(tmp_path, text, "style", "condition", "nowhere")


def test_condition_on_itself(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: format, type: binary}
          - {name: style, range: [1, 5], condition: {dimension: style, min: 1}}
        """
    )
    expect_error(tmp_path, text, "style", "itself")


def test_condition_on_known_dimension_is_fine(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: format, type: binary}
          - {name: style, range: [1, 5], condition: {dimension: format, min: 1}}
        """
    )
    condition = load_text(tmp_path, text).dimensions[1].condition
    assert condition is not None
    assert (condition.dimension, condition.min) == ("format", 1.0)


def test_condition_min_outside_referenced_range(tmp_path: Path) -> None:
    text = rubric_yaml(
        """\
          - {name: format, type: binary}
          - {name: style, range: [1, 5], condition: {dimension: format, min: 3}}
        """
    )
    expect_error(tmp_path, text, "style", "condition")


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    text = 'name: t\nversion: "1"\nbroken: key: value\ndimensions:\n  - {name: a, range: [1, 5]}\n'
    path = write(tmp_path, text)
    with pytest.raises(rlkit.RubricError) as info:
        rlkit.load_rubric(path)
    message = str(info.value)
    assert f"{path}:3:" in message
    assert "YAML syntax error" in message


def test_yaml_syntax_error_on_later_line(tmp_path: Path) -> None:
    text = 'name: t\nversion: "1"\ndimensions:\n  - name: a\n\trange: [1, 5]\n'
    path = write(tmp_path, text)
    with pytest.raises(rlkit.RubricError) as info:
        rlkit.load_rubric(path)
    assert f"{path}:5:" in str(info.value)


@pytest.mark.parametrize("missing", ["name", "version", "dimensions"])
def test_missing_required_field(tmp_path: Path, missing: str) -> None:
    fields = {
        "name": "name: t\n",
        "version": 'version: "1"\n',
        "dimensions": "dimensions:\n  - {name: a, range: [1, 5]}\n",
    }
    text = "".join(v for k, v in fields.items() if k != missing)
    expect_error(tmp_path, text, f": {missing}", "missing")


def test_missing_required_field_in_dimension(tmp_path: Path) -> None:
    text = rubric_yaml("  - {range: [1, 5]}\n")
    expect_error(tmp_path, text, "dimensions[0].name", "missing")


def test_empty_dimensions(tmp_path: Path) -> None:
    expect_error(tmp_path, 'name: t\nversion: "1"\ndimensions: []\n', "dimensions")


def test_file_not_found(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    with pytest.raises(rlkit.RubricError) as info:
        rlkit.load_rubric(path)
    assert str(path) in str(info.value)


def test_directory_is_not_a_rubric(tmp_path: Path) -> None:
    with pytest.raises(rlkit.RubricError) as info:
        rlkit.load_rubric(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes('name: caf\xe9\nversion: "1"\n'.encode("latin-1"))
    with pytest.raises(rlkit.RubricError) as info:
        rlkit.load_rubric(path)
    message = str(info.value)
    assert str(path) in message
    assert "UTF-8" in message


def test_top_level_list(tmp_path: Path) -> None:
    expect_error(tmp_path, "- name: t\n- version: 1\n", "mapping", "list")


def test_empty_file(tmp_path: Path) -> None:
    expect_error(tmp_path, "", "mapping")


def test_rubric_error_is_rlkit_error(tmp_path: Path) -> None:
    with pytest.raises(rlkit.RlkitError):
        rlkit.load_rubric(tmp_path / "missing.yaml")


def test_source_key_in_yaml_is_rejected(tmp_path: Path) -> None:
    text = rubric_yaml("  - {name: a, range: [1, 5]}\n", top="source: somewhere-else\n")
    expect_error(tmp_path, text, "source", "unknown key")


# --- warnings ----------------------------------------------------------------------------------


def n_dimensions(n: int) -> str:
    return rubric_yaml("".join(f"  - {{name: d{i}, type: binary}}\n" for i in range(n)))


def test_warning_for_eight_dimensions(tmp_path: Path) -> None:
    path = write(tmp_path, n_dimensions(MAX_DIMENSIONS_BEFORE_WARNING + 1))
    with pytest.warns(RubricWarning, match="8 dimensions") as record:
        rubric = rlkit.load_rubric(path)
    assert len(rubric.dimensions) == 8
    assert any(str(path) in str(w.message) for w in record)


def test_no_warning_for_seven_dimensions(tmp_path: Path) -> None:
    assert MAX_DIMENSIONS_BEFORE_WARNING == 7
    path = write(tmp_path, n_dimensions(7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rubric = rlkit.load_rubric(path)
    assert len(rubric.dimensions) == 7


def test_rubric_warning_is_user_warning() -> None:
    assert issubclass(RubricWarning, UserWarning)


# --- content hash and identity -----------------------------------------------------------------

REORDERED = """\
dimensions:
- checks: [{unit: chars, max: 12, type: length}]
  anchors:
    5: Short
    1:
      text: Long
  weight: 0.5
  range:
  - 1
  - 5
  type: scale
  name: brevity
"""

LAYOUT_A = """\
name: demo
version: "1.0"
dimensions:
  - name: format
    type: binary
    anchors: {0: {text: "No number"}, 1: {text: "A number"}}
    checks:
      - {type: regex, pattern: '^\\d+'}
  - name: brevity
    range: [1, 5]
    weight: 0.5
    anchors: {1: {text: Long}, 5: {text: Short}}
    checks:
      - {type: length, max: 12, unit: chars}
"""

LAYOUT_B = """\
# Same rubric, different layout, key order and changelog.
changelog:
  - {version: "0.9", date: "2025-01-01", note: draft}
  - {version: "1.0", date: "2026-11-29", note: "rewritten"}
version: '1.0'
dimensions:
- anchors:
    1: A number
    0: No number
  checks:
  - pattern: ^\\d+
    type: regex
  weight: 1
  range: [0, 1]
  type: binary
  name: format
- checks: [{unit: chars, max: 12, type: length}]
  anchors:
    5: Short
    "1":
      text: Long
  weight: 0.5
  range:
  - 1.0
  - 5
  type: scale
  name: brevity
name: demo
"""


def test_same_content_same_hash(tmp_path: Path) -> None:
    a = load_text(tmp_path, LAYOUT_A, "a.yaml")
    b = load_text(tmp_path, LAYOUT_B, "b.yaml")
    assert a.changelog == []
    assert len(b.changelog) == 2
    assert a.canonical() == b.canonical()
    assert a.content_hash == b.content_hash
    assert a.short_hash == b.short_hash == a.content_hash[:12]


def test_hash_ignores_file_location(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    a = load_text(tmp_path, VALID, "one.yaml")
    b = load_text(tmp_path, VALID, "sub/two.yaml")
    assert a.source != b.source
    assert a.content_hash == b.content_hash


def test_hash_is_stable_across_loads(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    assert rlkit.load_rubric(path).content_hash == rlkit.load_rubric(path).content_hash


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('0: {text: "No number"}', '0: {text: "No digit"}'),  # anchor text
        ("weight: 0.5", "weight: 0.75"),  # weight
        ("max: 12", "max: 13"),  # a check parameter
        ("'^\\d+'", "'^\\d*'"),  # a check pattern
        ("- name: brevity", "- name: shortness"),  # a dimension name
        ('version: "1.0"\ndescription', 'version: "1.1"\ndescription'),  # the version
    ],
)
def test_changed_content_changes_hash(tmp_path: Path, old: str, new: str) -> None:
    assert VALID.count(old) == 1
    a = load_text(tmp_path, VALID, "a.yaml")
    b = load_text(tmp_path, VALID.replace(old, new), "b.yaml")
    assert a.content_hash != b.content_hash


def test_changed_changelog_keeps_hash(tmp_path: Path) -> None:
    a = load_text(tmp_path, VALID, "a.yaml")
    b = load_text(tmp_path, VALID.replace("note: First version.", "note: Something else."), "b.yaml")
    assert a.changelog != b.changelog
    assert a.content_hash == b.content_hash


def test_identity(tmp_path: Path) -> None:
    rubric = load_text(tmp_path, VALID)
    assert rubric.identity() == {"name": "demo", "version": "1.0", "hash": rubric.content_hash}


def test_anchor_plain_string_equals_text_form(tmp_path: Path) -> None:
    plain = load_text(tmp_path, rubric_yaml("  - {name: a, range: [1, 3], anchors: {1: low, 3: high}}\n"),
                      "plain.yaml")
    full = load_text(
        tmp_path,
        rubric_yaml("  - {name: a, range: [1, 3], anchors: {1: {text: low}, 3: {text: high}}}\n"),
        "full.yaml",
    )
    assert plain.dimensions[0].anchors == full.dimensions[0].anchors
    assert plain.dimensions[0].anchors[1.0] == rlkit.core.rubric.Anchor(text="low")
    assert plain.dimensions[0].anchors[1.0].positive == []
    assert plain.content_hash == full.content_hash


def test_anchor_examples_change_hash(tmp_path: Path) -> None:
    plain = load_text(tmp_path, rubric_yaml("  - {name: a, range: [1, 3], anchors: {1: low}}\n"), "a.yaml")
    with_examples = load_text(
        tmp_path,
        rubric_yaml("  - {name: a, range: [1, 3], anchors: {1: {text: low, positive: [x]}}}\n"),
        "b.yaml",
    )
    assert plain.content_hash != with_examples.content_hash


def test_float_version_becomes_text(tmp_path: Path) -> None:
    text = "name: t\nversion: 1.0\ndimensions:\n  - {name: a, type: binary}\n"
    rubric = load_text(tmp_path, text)
    assert rubric.version == "1.0"
    assert isinstance(rubric.version, str)
    assert rubric.identity()["version"] == "1.0"


def test_int_version_becomes_text(tmp_path: Path) -> None:
    text = "name: t\nversion: 2\ndimensions:\n  - {name: a, type: binary}\n"
    assert load_text(tmp_path, text).version == "2"


def test_unquoted_changelog_date_becomes_text(tmp_path: Path) -> None:
    text = rubric_yaml(
        "  - {name: a, type: binary}\n",
        top='changelog:\n  - {version: "1", date: 2026-11-29, note: first}\n',
    )
    entry = load_text(tmp_path, text).changelog[0]
    assert entry.date == "2026-11-29"
    assert isinstance(entry.date, str)


def test_unquoted_changelog_version_becomes_text(tmp_path: Path) -> None:
    text = rubric_yaml(
        "  - {name: a, type: binary}\n",
        top='changelog:\n  - {version: 1.0, date: "2026-11-29", note: first}\n',
    )
    assert load_text(tmp_path, text).changelog[0].version == "1.0"


def test_binary_gets_unit_range(tmp_path: Path) -> None:
    dim = load_text(tmp_path, rubric_yaml("  - {name: flag, type: binary}\n")).dimensions[0]
    assert dim.range == (0.0, 1.0)
    assert (dim.low, dim.high) == (0.0, 1.0)
    assert dim.weight == 1.0


def test_rubric_from_dict_names_source() -> None:
    with pytest.raises(rlkit.RubricError) as info:
        rlkit.rubric_from_dict({"name": "t", "version": "1", "dimensions": [{"name": "a"}]}, "mem.yaml")
    assert str(info.value).startswith("mem.yaml: dimensions[0](a)")


def test_quantile_normalisation_ranks_each_dimension_within_the_batch():
    import math

    import torch

    from rlkit.reward.pipeline import quantile_normalize

    nan = math.nan
    scores = torch.tensor([[[0.90, 0.1], [0.95, nan]], [[0.95, 0.7], [0.99, 0.7]]])
    q = quantile_normalize(scores)
    # dim 0: 0.90 < 0.95 = 0.95 < 0.99 → ranks 1, 2.5, 2.5, 4 over n=4
    assert torch.allclose(q[..., 0].flatten(), torch.tensor([0.0, 0.5, 0.5, 1.0]))
    # dim 1: NaN kept; 0.1 < 0.7 = 0.7 → ranks 1, 2.5, 2.5 over n=3
    assert math.isnan(q[0, 1, 1]) and torch.allclose(q[1, :, 1], torch.tensor([0.75, 0.75]))
    assert float(q[0, 0, 1]) == 0.0
    assert torch.equal(quantile_normalize(torch.ones(1, 3, 1)), torch.full((1, 3, 1), 0.5))


# --- templates versioned with the rubric -------------------------------------------------------


def test_a_rubric_template_is_part_of_its_hash(tmp_path: Path) -> None:
    (tmp_path / "scores.jinja").write_text("Score {{ completion }} as JSON:", encoding="utf-8")
    with_template = VALID + "templates:\n  llm: scores.jinja\n  ranking: judge/rank_group.jinja\n"
    rubric = load_text(tmp_path, with_template)
    assert rubric.template_path("llm") == tmp_path / "scores.jinja"
    assert rubric.template_path("ranking").name == "rank_group.jinja", "a shipped name"
    assert rubric.template_path("rule") is None
    before = rubric.content_hash
    assert before != load_text(tmp_path, VALID, "plain.yaml").content_hash
    (tmp_path / "scores.jinja").write_text("Score {{ completion }} strictly, as JSON:", encoding="utf-8")
    assert load_text(tmp_path, with_template).content_hash != before, "editing the template changes the rubric"
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "scores.jinja").write_text("Score {{ completion }} strictly, as JSON:", encoding="utf-8")
    assert load_text(moved, with_template).content_hash == load_text(tmp_path, with_template).content_hash, \
        "the text counts, not where the file lies"


def test_a_missing_rubric_template_names_the_field(tmp_path: Path) -> None:
    expect_error(tmp_path, VALID + "templates:\n  llm: nowhere.jinja\n", "templates.llm", "nowhere.jinja")


def test_the_llm_judge_renders_the_template_its_rubric_names(tmp_path: Path) -> None:
    from rlkit.core.registry import load_registry
    from rlkit.judging import Completion

    (tmp_path / "mine.jinja").write_text("MINE {{ prompt }} -> {{ completion }}", encoding="utf-8")
    rubric = load_text(tmp_path, VALID + "templates:\n  llm: mine.jinja\n")
    asked: list[str] = []

    class Recording:
        def identity(self):
            return {"backend": "recording"}

        def complete(self, prompts):
            asked.extend(chat[0]["content"] for chat in prompts)
            return [Completion(text='{"format": 1, "brevity": 5}') for _ in prompts]

    judge = load_registry().create("judge", "llm", {"backend": "tiny"})
    judge.backend.get = lambda: Recording()
    scores = judge.score(rlkit.Rollout(records=[{"prompt": "1+1="}], completions=[["2"]]), rubric)
    assert asked == ["MINE 1+1= -> 2"] and scores.tolist() == [[[1.0, 5.0]]]
    judge_with_param = load_registry().create("judge", "llm", {"template": "judge/rubric_scores_compact.jinja"})
    judge_with_param.backend.get = lambda: Recording()
    judge_with_param.score(rlkit.Rollout(records=[{"prompt": "1+1="}], completions=[["2"]]), rubric)
    assert asked[-1].startswith("Score format"), "an explicit template param wins over the rubric's"


def test_the_old_rubrics_folder_is_one_line_naming_the_new_one(capsys):
    """conf/rubrics/ was renamed conf/rubric_files/ (beside the conf/rubric/ group): a path copied from an older
    config is told where its rubric went."""
    from rlkit.cli import main
    from rlkit.testing import one_error_line

    line = one_error_line(main(["validate", "rubric.path=pkg://rlkit.conf/rubrics/arithmetic.yaml"]),
                          capsys.readouterr().err)
    assert line.endswith("arithmetic.yaml: no such rubric file; the rubrics/ folder was renamed rubric_files/: use "
                         "pkg://rlkit.conf/rubric_files/arithmetic.yaml"), line
