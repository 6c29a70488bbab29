"""Hand-written per-record rubrics (rubric=per_record): any number of criteria, category weights as documented,
checked by `rlkit validate` as `fit` checks them, and categories a record's rubric lacks not applicable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit import rubric_from_dict
from rlkit.cli import main
from rlkit.core.rubric import CATEGORY_WEIGHTS


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def capital_rubric(city: str, check: dict | None = None) -> dict:
    """Two criteria, as a user writes them: the city named, and nothing but the city."""
    return {"name": f"capital-{city.lower()}", "version": "1", "dimensions": [
        {"name": "names_city", "type": "binary", "category": "essential",
         "checks": [check or {"type": "match", "mode": "contains", "field": "reference"}]},
        {"name": "city_only", "type": "binary", "category": "important",
         "checks": [{"type": "length", "max": 3, "unit": "words"}]}]}


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_criterion_without_weight_weighs_as_its_category():
    rubric = rubric_from_dict(capital_rubric("Warsaw"), "r.yaml")
    assert [d.weight for d in rubric.dimensions] == [CATEGORY_WEIGHTS["essential"], CATEGORY_WEIGHTS["important"]]
    assert [d.weight for d in rubric.dimensions] == [1.0, 0.7]
    written = capital_rubric("Warsaw")
    written["dimensions"][1]["weight"] = 0.25
    assert rubric_from_dict(written).dimensions[1].weight == 0.25, "a weight written down wins"
    one = {**written, "dimensions": written["dimensions"][:1]}
    assert len(rubric_from_dict(one).dimensions) == 1, "a hand-written rubric may have any number of criteria"


def test_validate_refuses_a_record_rubric_that_fit_would_refuse(tmp_path, capsys):
    good = tmp_path / "warsaw.yaml"
    good.write_text(json.dumps(capital_rubric("Warsaw")), encoding="utf-8")
    bad = tmp_path / "paris.yaml"
    bad.write_text(json.dumps(capital_rubric("Paris", {"type": "match", "mode": "fuzzy"})), encoding="utf-8")
    prompt = [{"role": "user", "content": "What is the capital of Poland? Answer with the city name only."}]
    data = _jsonl(tmp_path / "ok.jsonl", [{"prompt": prompt, "reference": "Warsaw", "rubric": str(good)}] * 2)
    assert main(["validate", "rubric=per_record", "judge=rule", f"data.path={data}"]) == 0, capsys.readouterr().err
    assert "config ok" in capsys.readouterr().out, "two criteria pass, as fit takes them"
    data = _jsonl(tmp_path / "bad.jsonl", [{"prompt": prompt, "reference": "Warsaw", "rubric": str(good)},
                                           {"prompt": prompt, "reference": "Paris", "rubric": str(bad)}])
    for command in ("validate", "fit"):
        assert main([command, "rubric=per_record", "judge=rule", f"data.path={data}",
                     f"hydra.run.dir={tmp_path / 'run'}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"rlkit: error: {bad}: dimensions[0](names_city).checks[0]"
                                                        ".mode: must be one of exact, numeric, contains"), err
    assert not (tmp_path / "run").exists(), "fit refused before loading a model"
    inline = _jsonl(tmp_path / "inline.jsonl", [{"prompt": prompt, "rubric": {"name": "x", "version": "1"}}])
    assert main(["validate", "rubric=per_record", "judge=rule", f"data.path={inline}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlkit: error: {inline}: record 1 ") and "dimensions" in err, err


def test_categories_no_record_has_are_not_applicable_in_score(tmp_path, capsys):
    rubric = tmp_path / "warsaw.yaml"
    rubric.write_text(json.dumps(capital_rubric("Warsaw")), encoding="utf-8")
    data = _jsonl(tmp_path / "scored.jsonl", [{
        "prompt": "What is the capital of Poland? Answer with the city name only.", "reference": "Warsaw",
        "rubric": str(rubric), "completions": ["The capital of Poland is Warsaw.", "Warsaw.", "It is Kraków."]}])
    code = main(["score", "rubric=per_record", "judge=rule", f"data.path={data}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "not applicable: optional, pitfalls_avoided (judge rule has nothing to score there" in out
    table = out.split("not applicable")[0]
    assert "pitfalls_avoided" not in table and "optional" not in table and "nan" not in table
    assert "essential" in table and "important" in table
