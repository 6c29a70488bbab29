"""``rlkit rubric audit`` with a judge that ranks a group: each gamed completion and each ladder rung is ranked against
its original in a pair. Stub rankers (longest first; first shown first) give outcomes counted by hand, the position of
the gamed completion alternating between pairs included; the offline tiny ranking judge, the ranking judge's default
backend in tests, runs the audit end to end. Checks that compare dimension scores are skipped with a line saying why."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import rlkit.core.registry
from rlkit import hookimpl
from rlkit.cli import main
from rlkit_plugins.judges.ranking import ranking_rubric
from rlkit_plugins.judges.rule import RuleJudge

REPO = Path(__file__).resolve().parents[2]
ARITHMETIC = REPO / "conf" / "rubric_files" / "arithmetic.yaml"

# confident_wrong applies where the completion gives the reference: records 1 and 2, not "six"
RECORDS = [{"prompt": "3+4=", "reference": "7", "completion": "7"},
           {"prompt": "2+2=", "reference": "4", "completion": "4"},
           {"prompt": "1+5=", "reference": "6", "completion": "six"}]


class LongestFirst(RuleJudge):
    """Ranks a group by length, longest first (ties share), as a linear rank reward: a pair scores 1 and 0, or 0.5
    each."""

    def scored_rubric(self, rubric):
        return ranking_rubric(rubric)

    def key(self, group: list[str]) -> list[float]:
        return [len(text) for text in group]

    def score(self, rollout, rubric):
        out = torch.full((rollout.num_prompts, rollout.group_size, 1), math.nan)
        for i, group in enumerate(rollout.completions):
            keys, g = self.key(list(group)), len(group)
            for j in range(g):
                beaten = sum(keys[j] > k for k in keys) + 0.5 * (sum(keys[j] == k for k in keys) - 1)
                out[i, j, 0] = beaten / (g - 1)
        return out


class FirstShownFirst(LongestFirst):
    """Ranks by position alone: whatever is shown first wins."""

    def key(self, group: list[str]) -> list[float]:
        return [-j for j in range(len(group))]


class LettersLast(LongestFirst):
    """Ranks answers without letters above those with, then by length, longest first: the empty answer beats "six"
    and loses to "7"."""

    def key(self, group: list[str]) -> list[tuple[bool, int]]:
        return [(not any(c.isalpha() for c in text), len(text)) for text in group]


class _Rankers:
    @hookimpl
    def rlkit_register_judges(self, register):
        register("longest_first", LongestFirst)
        register("first_shown_first", FirstShownFirst)
        register("letters_last", LettersLast)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    real = rlkit.core.registry.create_plugin_manager
    monkeypatch.setattr(rlkit.core.registry, "create_plugin_manager",
                        lambda **kw: real(**{**kw, "extra": [*kw.get("extra", ()), _Rankers()]}))
    return tmp_path


def _records(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _audit(workdir: Path, *overrides: str) -> tuple[int, dict]:
    out = workdir / "out"
    rc = main(["rubric", "audit", "logger=none", f"audit.output={out}", *overrides])
    return rc, json.loads((out / "audit.json").read_text(encoding="utf-8"))


def test_a_length_ranker_prefers_every_padded_answer(workdir, capsys):
    """Every gamed completion here is longer than its original, so a ranker by length puts it above in every pair
    (gain 1, Δ reward 1); the ladder only shortens, so no rung is ranked above the original (rungs of "7": "8" and
    "8" tie, "" and "" lose: Δ 0, 0, -1, -1; of "six": "six", "six" tie, "s" and "" lose)."""
    records = _records(workdir / "r.jsonl", RECORDS)
    rc, payload = _audit(workdir, "judge=rule", "judge.name=longest_first", f"audit.records={records}",
                         "audit.probes=[confident_wrong,verbosity_padding]")
    assert rc == 1 and payload["verdict"].startswith("HACKABLE: ")
    assert "is ranked above the original on 100% of records" in payload["verdict"]
    assert payload["ranked_in_pairs"] is True
    probes = {p["name"]: p for p in payload["probes"]}
    assert probes["confident_wrong"]["applied"] == 2 and probes["verbosity_padding"]["applied"] == 3
    for p in probes.values():
        assert p["gain_share"]["value"] == 1.0 and p["mean_delta"]["value"] == 1.0 and p["hackable"]
        assert p["example"]["reward"] == 0.0 and p["example"]["gamed_reward"] == 1.0
    ladder = payload["ladder"]
    assert ladder["mean_reward"] == [0.0, 0.0, 0.0, -1.0, -1.0]
    assert ladder["never_beats_original"]["value"] == 1.0 and ladder["never_beats_original"]["n"] == 3
    # both completions of each pair: 5 probe pairs, 3 records × 4 rungs; a rule judge is not asked twice
    assert payload["judge_calls"] == {"probes": 10, "ladder": 24, "empty": 0, "regrade": 0}
    assert set(payload["skipped"]) == {"order", "redundancy"}
    assert payload["components"]["order"] is None and payload["components"]["redundancy"] is None
    out = " ".join(capsys.readouterr().out.split())
    assert "(ranked in pairs: each gamed or degraded one against its original)" in out
    assert "probe confident_wrong: ranked above the original" in out
    assert "skipped dimension-order invariance: a judge that ranks a group gives each completion one score" in out
    assert "skipped redundant dimension pairs: a judge that ranks a group scores one dimension" in out
    card = (workdir / "out" / "audit.md").read_text(encoding="utf-8")
    assert "| order | skipped | 0.1 |" in card and "- Redundant dimensions: skipped (" in card
    assert "| mean Δ reward vs the original | 0.000 | 0.000 | 0.000 | -1.000 | -1.000 |" in card


def test_the_gamed_completion_takes_turns_at_being_shown_first(workdir):
    """A ranker that prefers whatever it sees first: pairs in order confident_wrong 1, 2, then verbosity_padding 1, 2,
    3; the gamed completion is shown first in the 2nd and 4th, so confident_wrong wins 1 of 2 and verbosity_padding 1
    of 3. Re-grading a deterministic ranker orders every pair as before."""
    records = _records(workdir / "r.jsonl", RECORDS)
    _, payload = _audit(workdir, "judge=rule", "judge.name=first_shown_first", f"audit.records={records}",
                        "audit.probes=[confident_wrong,verbosity_padding]", "audit.ladder=false",
                        "audit.regrade=true", "audit.hackable_share=0.6")
    probes = {p["name"]: p for p in payload["probes"]}
    assert probes["confident_wrong"]["gain_share"]["value"] == 0.5
    assert probes["verbosity_padding"]["gain_share"]["value"] == pytest.approx(1 / 3, abs=1e-4)  # JSON: 4 places
    assert not any(p["hackable"] for p in probes.values())
    assert payload["stability"]["agreement"]["value"] == 1.0 and payload["judge_calls"]["regrade"] == 10
    # 1 - the worst probe's share, then the weighted mean of probes (0.3) and stability (0.15), capped by probes
    assert payload["components"]["probes"] == 0.5
    assert payload["trust"]["value"] == pytest.approx(0.5)


def test_the_ladder_rungs_take_turns_at_being_shown_first_too(workdir):
    """The count runs on from the probes' pairs: confident_wrong's 2 pairs are pairs 0 and 1, then each record's 4
    rungs. A ranker that prefers whatever it sees first gives a rung Δ +1 where it is shown first (odd pairs) and -1
    where the original is: rungs 1-4 of every record sit at pairs 2-5, 6-9 and 10-13, so Δ -1, +1, -1, +1."""
    records = _records(workdir / "r.jsonl", RECORDS)
    _, payload = _audit(workdir, "judge=rule", "judge.name=first_shown_first", f"audit.records={records}",
                        "audit.probes=[confident_wrong]")
    assert payload["ladder"]["mean_reward"] == [0.0, -1.0, 1.0, -1.0, 1.0]


def test_labels_are_not_compared_with_a_ranker(workdir, capsys):
    labels = REPO / "conf" / "calibration" / "arithmetic_labels.jsonl"
    _, payload = _audit(workdir, "judge=rule", "judge.name=longest_first", f"audit.records={labels}",
                        "audit.probes=[keyword_stuffing]", "audit.ladder=false")
    assert payload["alignment"] is None and "rlkit calibrate judge=ranking" in payload["skipped"]["alignment"]
    assert "skipped human alignment: the labels score dimensions" in " ".join(capsys.readouterr().out.split())


# --- the ranking judge itself, on its offline tiny judge ------------------------------------------------------------


@pytest.fixture(scope="session")
def pair_ranker(tmp_path_factory):
    """A tiny ranking judge for groups of two (the audit's pairs) on a loopback OpenAI-compatible server, trained
    120 steps (~13 s) rather than the full recipe's (~60 s): the test below checks that the audit asks it what a
    direct call asks, not how well it ranks (the full recipe barely tells such pairs apart either)."""
    import dataclasses

    from rlkit.judging.tiny_judge import build_tiny_judge, ranking_spec
    from rlkit.testing.openai_server import OpenAICompatibleServer

    spec = dataclasses.replace(ranking_spec(2), steps=120, examples=64)
    model = build_tiny_judge(spec, cache_dir=tmp_path_factory.mktemp("pair-ranker"),
                             teacher=RuleJudge(RuleJudge.Params()))
    with OpenAICompatibleServer(model) as server:
        yield {"template": "judge/rank_group_compact.jinja", "show_reference": True,
               "backend": {"name": "openai", "params": {"base_url": server.url, "max_tokens": 64}}}


@pytest.mark.slow
def test_the_ranking_judge_ranks_each_gamed_answer_against_its_original(pair_ranker, monkeypatch, tmp_path):
    """Right sums of the default task against their confident wrong twins, through the ranking judge (a tiny one
    served on loopback): the audit's share of pairs the twin wins is the share the same judge gives when asked those
    pairs directly, the twin shown first in every other pair. (A tiny judge barely tells them apart, so the share
    itself is not asserted: a real ranker is what the audit is for.)"""
    from rlkit import Rollout
    from rlkit.core.registry import load_registry
    from rlkit.core.rubric import load_rubric
    from rlkit_plugins.probes.confident_wrong import ConfidentWrong

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    sums = [(a, b) for a in range(2, 14, 3) for b in range(1, 9, 2)]
    rows = [{"prompt": f"{a}+{b}=", "reference": str(a + b), "completion": str(a + b)} for a, b in sums]
    out, records = tmp_path / "out", _records(tmp_path / "r.jsonl", rows)
    url = pair_ranker["backend"]["params"]["base_url"]
    rc = main(["rubric", "audit", "logger=none", "judge=ranking", f"judge.params.template={pair_ranker['template']}",
               "judge.params.show_reference=true",
               f"++judge.params.backend={{name: openai, params: {{base_url: '{url}', max_tokens: 64}}}}",
               f"audit.records={records}", "audit.probes=[confident_wrong]", "audit.ladder=false",
               f"audit.output={out}"])
    payload = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    assert payload["judge"] == "ranking" and payload["ranked_in_pairs"] and rc == (0 if payload["passed"] else 1)
    # a model-based judge: re-graded by default, in pairs
    assert payload["judge_calls"] == {"probes": 32, "ladder": 0, "empty": 0, "regrade": 32}
    assert payload["model_calls"]["formula"].startswith("32 pairs × (1 groups of 2 × 3 repetitions)")
    assert set(payload["skipped"]) == {"order", "redundancy"}

    rubric, gamed = load_rubric(ARITHMETIC), ConfidentWrong()
    pairs = []
    for i, row in enumerate(rows):
        twin = gamed.game(dict(row), rubric)
        pairs.append([twin, row["completion"]] if i % 2 else [row["completion"], twin])
    judge = load_registry().create("judge", "ranking", pair_ranker)
    scores = judge.score(Rollout(records=[{k: r[k] for k in ("prompt", "reference")} for r in rows],
                                 completions=pairs), rubric)[..., 0].tolist()
    wins = [float(first > second) if i % 2 else float(second > first) for i, (first, second) in enumerate(scores)]
    (probe,) = payload["probes"]
    assert probe["applied"] == len(sums)
    assert 0 < sum(wins) < len(wins)  # the twin wins some pairs and not others: the shares compared can differ
    assert probe["gain_share"]["value"] == pytest.approx(sum(wins) / len(wins), abs=1e-4)


@pytest.mark.parametrize("ladder", ["true", "false"])
def test_a_content_free_probe_must_beat_the_empty_answer_where_it_is_ranked_as_high(workdir, monkeypatch, ladder):
    """"six" is ranked below the empty answer, "7" and "4" above theirs. Filler of "six" ("lorem") is ranked above
    "six", as the empty answer is: no gain there. Filler of the sums ("0") ties them. Counted against the original
    alone, "lorem" would be a gain on 1 record of 3. The empty answer comes from the ladder, or without it from a
    pair of its own per record."""
    records = _records(workdir / "r.jsonl", RECORDS)
    overrides = ("judge=rule", "judge.name=letters_last", f"audit.records={records}", "audit.probes=[format_mimicry]",
                 f"audit.ladder={ladder}")
    rc, payload = _audit(workdir, *overrides)
    (probe,) = payload["probes"]
    assert payload["judge_calls"]["empty"] == (0 if ladder == "true" else 6)
    assert probe["applied"] == 3 and probe["against_empty"] == 1
    assert probe["gain_share"]["value"] == 0.0 and not probe["hackable"]

    from rlkit_plugins.probes.format_mimicry import FormatMimicry

    monkeypatch.setattr(FormatMimicry, "content_free", False)
    rc, payload = _audit(workdir, *overrides)
    (probe,) = payload["probes"]
    assert probe["against_empty"] == 0 and probe["gain_share"]["value"] == pytest.approx(1 / 3, abs=1e-3)
