"""benchmarks/tighten_continue.py's pure parts: reading a continued run's signal and held-out answers, `rlkit score`'s
output per answer set, which dimensions a proposal tightens, and the verdict rule on constructed numbers."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import tighten_continue as tc  # noqa: E402

RANGES = {"correctness": (0.0, 1.0), "clarity": (1.0, 5.0)}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_run_is_read_as_its_mean_signal_and_its_first_and_last_heldout_answers(tmp_path):
    steps = [{"step": s, "metrics": {"reward/std": 0.1 * s, "advantages/frac_zero_groups": 1.0 - 0.25 * s}}
             for s in range(4)]
    # a held-out evaluation's row carries no training metrics and must not count as a step
    write_jsonl(tmp_path / "metrics.jsonl", [*steps, {"step": 4, "metrics": {"heldout/reward": 0.5}}])
    everything, last_two = tc.read_signal(tmp_path), tc.read_signal(tmp_path, last=2)
    assert (everything.zero_adv, round(everything.reward_std, 6)) == (0.625, 0.15)
    assert (last_two.zero_adv, round(last_two.reward_std, 6)) == (0.375, 0.25)
    write_jsonl(tmp_path / "heldout_samples.jsonl", [
        {"step": 0, "prompt": "1+1=", "reference": "2", "completion": "3"},
        {"step": 4, "prompt": "1+1=", "reference": "2", "completion": "2"},
        {"step": 0, "prompt": "2+2=", "reference": "4", "completion": "4"},
        {"step": 4, "prompt": "2+2=", "reference": "4", "completion": "first 2, second 2, finally 4"}])
    start, end = tc.heldout_answers(tmp_path, "start", first=True), tc.heldout_answers(tmp_path, "unchanged", False)
    assert [a["completion"] for a in start] == ["3", "4"] and {a["answers"] for a in start} == {"start"}
    assert [a["completion"] for a in end] == ["2", "first 2, second 2, finally 4"]
    assert [a["id"] for a in end] == ["unchanged-0", "unchanged-1"] and end[0]["reference"] == "2"


def test_score_output_is_averaged_per_answer_set_and_an_unscored_dimension_is_counted_not_averaged_as_zero(tmp_path):
    path = tmp_path / "scored.jsonl"
    write_jsonl(path, [
        {"answers": "start", "scores": {"correctness": 1.0, "clarity": 3.0}, "reward": 0.75},
        {"answers": "start", "scores": {"correctness": 0.0, "clarity": None}, "reward": 0.25},
        {"answers": "tightened", "scores": {"correctness": 1.0, "clarity": 5.0}, "reward": 1.0}])
    got = tc.read_scored(path)
    assert got["start"] == {"correctness": 0.5, "clarity": 3.0, "unscored/clarity": 1.0, "reward": 0.5}
    assert got["tightened"] == {"correctness": 1.0, "clarity": 5.0, "reward": 1.0}


def seed(n: int, tight_end: float, same_end: float, reward_end: float) -> tc.SeedResult:
    """A seed whose clarity starts at 3 (0.5 of its range) and ends at the given values per arm; under the original
    rubric the reward starts at 0.8 and ends at ``reward_end`` in the tightened arm."""
    proposal = {"start": {"clarity": 3.0, "correctness": 1.0, "reward": 0.7},
                "tightened": {"clarity": tight_end, "correctness": 1.0, "reward": 0.8},
                "unchanged": {"clarity": same_end, "correctness": 1.0, "reward": 0.7}}
    original = {"start": {"reward": 0.8}, "tightened": {"reward": reward_end}, "unchanged": {"reward": 0.8}}
    signal = {arm: tc.Signal(0.5, 0.1) for arm in tc.ARMS}
    return tc.SeedResult(n, signal, {"original": original, "proposal": proposal})


def test_the_tightened_arm_keeps_learning_when_its_gain_beats_the_unchanged_arms_by_more_than_the_spread():
    # clarity gains (scaled by its 1-5 range): tightened 0.25, 0.30, 0.20; unchanged 0.0, 0.05, -0.05
    results = [seed(1, 4.0, 3.0, 0.79), seed(2, 4.2, 3.2, 0.80), seed(3, 3.8, 2.8, 0.78)]
    label, figures = tc.verdict(results, ["clarity"], RANGES)
    assert label == "keeps learning"
    # medians 0.25 against 0.0, spread 0.10 (either arm's range over seeds)
    assert "tightened +0.250, unchanged +0.000" in figures and "spread 0.100" in figures


def test_it_does_not_when_the_difference_is_within_the_spread_or_the_original_reward_falls():
    noisy = [seed(1, 4.0, 3.0, 0.8), seed(2, 3.2, 3.6, 0.8), seed(3, 4.4, 2.8, 0.8)]
    # medians 0.25 against 0.0, but the tightened arm's gains span 0.05..0.35: 0.25 is not above the 0.30 spread
    assert tc.verdict(noisy, ["clarity"], RANGES)[0] == "does not keep learning"
    costly = [seed(1, 4.0, 3.0, 0.70), seed(2, 4.2, 3.2, 0.72), seed(3, 3.8, 2.8, 0.74)]
    label, figures = tc.verdict(costly, ["clarity"], RANGES)  # a clear gain, but the original reward falls 0.08
    assert label == "does not keep learning" and "-0.080" in figures
    twins = [seed(1, 3.0, 3.0, 0.8), seed(2, 3.0, 3.0, 0.8)]  # an anchors-only proposal under the rule judge
    assert tc.verdict(twins, ["clarity"], RANGES)[0] == "does not keep learning"
    assert tc.verdict([seed(1, 5.0, 3.0, 0.8)], ["clarity"], RANGES)[0].startswith("undecided")


def test_the_tightened_dimensions_are_those_the_proposal_changes_and_an_anchor_only_change_is_named(tmp_path):
    v1, v2 = REPO / "benchmarks" / "reward_hacking_v1.yaml", REPO / "benchmarks" / "reward_hacking_v2.yaml"
    assert tc.tightened_dimensions(v1, v2) == (["clarity"], False)  # v2 adds clarity's absent check
    data = yaml.safe_load(v2.read_text())
    data.pop("changelog")
    data["version"] = "3.0"
    data["dimensions"][1]["anchors"][3]["negative"].append("6")  # what tighten proposes on a v2 run
    anchors_only = tmp_path / "v3.yaml"
    anchors_only.write_text(yaml.safe_dump(data))
    assert tc.tightened_dimensions(v2, anchors_only) == (["clarity"], True)


def test_the_length_variant_of_the_chat_rubric_scores_as_the_preset_and_gives_tighten_a_level_to_raise():
    from rlkit.core.rubric import load_rubric
    from rlkit.core.types import Rollout
    from rlkit.evaluation.rubric_tightening import tighten_length
    from rlkit_plugins.judges.rule import RuleJudge

    shipped = load_rubric(REPO / "conf" / "rubric_files" / "chat_arithmetic.yaml")
    variant = load_rubric(REPO / "benchmarks" / "chat_arithmetic_length.yaml")
    assert variant.dimension_names == shipped.dimension_names
    # the logged SmolLM2 answers' kinds, and the edges of stops's 40 characters and one line
    answers = ["42", "42.", "17 + 25 = 42", "17 + 25 = 32", "The answer is 42.", "42\n\nThis is a classic example",
               "x" * 40, "x" * 41, " 42 ", "", "   ", "\n42\n", "The sum of seventeen and twenty-five is forty-two"]
    rollout = Rollout(records=[{"prompt": "What is 17 + 25?", "reference": "42"}], completions=[answers])
    a, b = RuleJudge().score(rollout, shipped), RuleJudge().score(rollout, variant)
    assert torch.equal(a.nan_to_num(-9.0), b.nan_to_num(-9.0))
    assert a[0, :, shipped.dimension_names.index("stops")].tolist()[6:8] == [1.0, 0.0]  # 40 passes, 41 does not
    stops = variant.dimensions[variant.dimension_names.index("stops")]
    length = next(c for c in stops.checks if c["type"] == "length")
    # restated sums of 9, 11, 12 and 12 characters at the ceiling: 11 passes half of them, 9 a quarter
    raised, said = tighten_length(length, ["3 + 4 = 7", "3 + 11 = 14", "16 + 15 = 31", "16 + 19 = 35"])
    assert raised["max"] == 11 and "40 → 11 chars: 2 of the 4" in said


def test_heldout_answers_carry_the_records_fields_and_an_unscored_dimension_is_left_out_of_the_change(tmp_path):
    # the definitions task: no reference, the `forms` a match check reads, and the judge's dimensions unscored (null)
    forms = ["hug", "hugs", "hugged", "hugging"]
    write_jsonl(tmp_path / "heldout_samples.jsonl", [
        {"step": 0, "prompt": "Define hug.", "completion": "A hug is ... I hugged her.",
         "record": {"id": "def-7", "word": "hug", "forms": forms}}])
    (answer,) = tc.heldout_answers(tmp_path, "start", first=True)
    assert answer["forms"] == forms and answer["id"] == "start-0" and "reference" not in answer
    write_jsonl(tmp_path / "metrics.jsonl", [
        {"step": 0, "metrics": {"heldout/brevity": 0.5, "heldout/correctness": None}},
        {"step": 40, "metrics": {"heldout/brevity": 1.0, "heldout/correctness": None}}])
    assert tc.heldout_change(tmp_path) == "brevity 0.500 → 1.000"


def test_a_finished_arm_is_read_again_only_under_the_rubric_it_trained_on(tmp_path, monkeypatch):
    trained = []

    def fake_fit(args, log=None):  # stands in for `rlkit fit`: the run folder with its summary.json, written last
        run_dir = Path(next(a for a in args if a.startswith("hydra.run.dir=")).split("=", 1)[1])
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text("{}")
        trained.append(run_dir.name)
        return "", 1.0

    monkeypatch.setattr(tc, "must", fake_fit)
    proposal = tmp_path / "proposal.yaml"
    proposal.write_text("version: 2.0\n")
    first = tc.arm("real", "tightened", 1, tmp_path / "policy", proposal, 20, tmp_path, [])
    again = tc.arm("real", "tightened", 1, tmp_path / "policy", proposal, 20, tmp_path, [])
    assert first[1] == 1.0 and math.isnan(again[1]) and trained == ["tightened-seed1"]
    proposal.write_text("version: 2.0\n# rewritten by a later tighten\n")
    rerun = tc.arm("real", "tightened", 1, tmp_path / "policy", proposal, 20, tmp_path, [])
    assert rerun[1] == 1.0 and trained == ["tightened-seed1"] * 2
    assert (tmp_path / "tightened-seed1.stale-1" / "summary.json").is_file()
    (tmp_path / "tightened-seed1.rubric.sha256").unlink()  # a folder that recorded no rubric is not trusted either
    tc.arm("real", "tightened", 1, tmp_path / "policy", proposal, 20, tmp_path, [])
    assert trained == ["tightened-seed1"] * 3 and (tmp_path / "tightened-seed1.stale-2").is_dir()
    (tmp_path / "tightened-seed1" / "summary.json").unlink()  # a fit stopped part way: set aside, trained afresh
    tc.arm("real", "tightened", 1, tmp_path / "policy", proposal, 20, tmp_path, [])
    assert trained == ["tightened-seed1"] * 4 and (tmp_path / "tightened-seed1.unfinished-1").is_dir()


def test_held_out_scores_are_read_where_the_judge_leaves_dimensions_unscored_by_design(tmp_path, monkeypatch, capsys):
    runs = {}
    for name in tc.ARMS:
        runs[name] = tmp_path / name
        runs[name].mkdir()
        write_jsonl(runs[name] / "heldout_samples.jsonl", [
            {"step": s, "prompt": "Define hug.", "completion": f"A hug is ... ({name} {s})"} for s in (0, 20)])
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text("name: r\n")

    def fake_rlkit(args, log=None):  # `rlkit score` under judge.params.judges.llm=rule: written, then exit 3
        out = Path(next(a for a in args if a.startswith("score.output=")).split("=", 1)[1])
        rows = [{**json.loads(line), "scores": {"uses_word": 1.0, "correctness": None}, "reward": 1.0}
                for line in Path(next(a for a in args if a.startswith("data.path=")).split("=", 1)[1]).read_text()
                .splitlines()]
        write_jsonl(out, rows)
        log.write_text("--- stderr ---\nrlkit: error: score: judge hybrid scored correctness on none of the 3\n")
        return 3, "", 1.0

    monkeypatch.setattr(tc, "rlkit", fake_rlkit)
    scores = tc.score_heldout(1, runs, {"original": rubric}, [], tmp_path)
    assert scores["original"]["start"]["uses_word"] == 1.0
    assert scores["original"]["start"]["unscored/correctness"] == 1.0
    assert "scored correctness on none of the 3; read without them" in capsys.readouterr().out
    monkeypatch.setattr(tc, "rlkit", lambda args, log=None: (2, "", 1.0))  # anything else still stops the script
    with pytest.raises(SystemExit, match="failed \\(exit 2\\)"):
        tc.score_heldout(1, runs, {"proposal": rubric}, [], tmp_path)
