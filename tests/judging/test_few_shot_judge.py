"""``judge.params.examples``: the ``llm`` judge taught by a few labels. What a real loopback server is asked: k
labelled examples per dimension by the rule, the same under a seed, never one of the judged prompt, after an
unchanged rubric prefix; bad example files fail ``rlkit validate`` in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.core.types import Rollout
from rlkit.evaluation.labelling import labelling_line, write_lines
from rlkit.testing.canned_chat import CannedChatServer

ARITHMETIC = Path(__file__).resolve().parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"
ANSWER = json.dumps({"format": 1, "correctness": 1, "brevity": 5, "repetition": 5})
# prompt, completion, brevity level: correctness follows the sum, format 1, repetition 5
LINES = [("1+1=", "2", 5), ("2+2=", "5", 5), ("3+3=", "6 is the answer", 3), ("4+4=", "the sum is 9", 1),
         ("5+5=", "10", 5), ("6+6=", "12 12", 3), ("7+7=", "it is fourteen i think", 1), ("8+8=", "17", 5)]
WHERE = r"judge\.params\.examples( \([^)]*\))?: "  # built from the params: the YAML named beside the key
EXAMPLE = re.compile(r"^\[(\w+): (\d+)\]\nPROMPT: (.*)$", re.MULTILINE)


def _labelling(path: Path, *, extra_labellers: bool = True) -> Path:
    rubric = load_rubric(ARITHMETIC)
    lines = []
    for prompt, completion, brevity in LINES:
        line = labelling_line(prompt=prompt, completion=completion, rubric=rubric, step=0, window=0)
        right = int(completion.split()[0] == str(2 * int(prompt.split("+")[0])))
        line["labels"] = {"format": int(completion[0].isdigit()), "correctness": right, "brevity": brevity,
                          "repetition": 5}
        lines.append(line)
    if extra_labellers:
        # two labellers split evenly on a new line's brevity: no majority, never an example of it
        split = labelling_line(prompt="9+9=", completion="18!!", rubric=rubric, step=0, window=0)
        split["labellers"] = {"ann": {"brevity": 2}, "bob": {"brevity": 4}}
        split["labelled_by"] = {"brevity": "ann"}
        split["labels"]["brevity"] = 2
        lines.append(split)
    write_lines(path, lines)
    return path


def _asked(tmp_path, monkeypatch, rollout: Rollout, **params) -> list[str]:
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    with CannedChatServer(lambda messages: ANSWER) as server:
        judge = load_registry().create("judge", "llm", {"backend": {"name": "openai", "params": {
            "base_url": server.url}}, **params})
        rubric = load_rubric(ARITHMETIC)
        judge.check_rubric(rubric)
        judge.assess(rollout, rubric)
    return [m[0]["content"] for m in server.requests]


def _examples(text: str) -> list[tuple[str, int, str]]:
    return [(dim, int(level), prompt) for dim, level, prompt in EXAMPLE.findall(text)]


def test_k_examples_per_dimension_spread_over_the_levels_after_an_unchanged_rubric(tmp_path, monkeypatch):
    file = _labelling(tmp_path / "labels.jsonl")
    judged = Rollout(records=[{"prompt": "20+1=", "reference": "21"}], completions=[["21"]])
    (zero,) = _asked(tmp_path / "zero", monkeypatch, judged)
    (few,) = _asked(tmp_path / "few", monkeypatch, judged, examples=str(file), examples_k=2)
    shown = _examples(few)
    for dim in ("format", "correctness", "brevity", "repetition"):
        assert sum(d == dim for d, _, _ in shown) == 2, dim
    # stratified: the lowest and the highest level each dimension has in the file (brevity: 1, 3 and 5 -> 1, 5)
    assert [lvl for d, lvl, _ in shown if d == "brevity"] == [1, 5]
    assert [lvl for d, lvl, _ in shown if d == "correctness"] == [0, 1]
    assert [lvl for d, lvl, _ in shown if d == "repetition"] == [5, 5]  # one level present: it twice
    # the rubric-first prefix is the zero-shot prompt's, unchanged; the examples follow it, before the record
    prefix = zero.split("PROMPT:\n20+1=")[0]
    assert few.startswith(prefix) and few.index("LABELLED EXAMPLES") == len(prefix)
    assert few.index("LABELLED EXAMPLES") < few.index("PROMPT:\n20+1=") and "9+9=" not in few  # split: no majority
    (again,) = _asked(tmp_path / "again", monkeypatch, judged, examples=str(file), examples_k=2)
    assert again == few, "the same file, rubric and seed: the same prompt"


def test_k_and_the_rule_and_the_seed_choose_the_examples(tmp_path, monkeypatch):
    file = _labelling(tmp_path / "labels.jsonl")
    judged = Rollout(records=[{"prompt": "20+1=", "reference": "21"}], completions=[["21"]])
    (four,) = _asked(tmp_path / "k4", monkeypatch, judged, examples=str(file), examples_k=4)
    # k above the levels present: every level, then again from the lowest
    assert sorted(lvl for d, lvl, _ in _examples(four) if d == "brevity") == [1, 1, 3, 5]
    (none,) = _asked(tmp_path / "k0", monkeypatch, judged, examples=str(file), examples_k=0)
    assert "LABELLED EXAMPLES" not in none
    drawn = [_asked(tmp_path / f"r{seed}", monkeypatch, judged, examples=str(file), examples_k=3,
                    examples_rule="random", examples_seed=seed)[0] for seed in (0, 0, 1)]
    assert drawn[0] == drawn[1] and _examples(drawn[0]) != _examples(drawn[2])
    assert all(sum(d == "brevity" for d, _, _ in _examples(text)) == 3 for text in drawn)


def test_the_order_the_examples_are_shown_in(tmp_path, monkeypatch):
    """Ascending puts the top level last, read just before the judged completion (the recency suspect); descending
    the lowest; shuffled a seeded order of the very same examples."""
    file = _labelling(tmp_path / "labels.jsonl")
    judged = Rollout(records=[{"prompt": "20+1=", "reference": "21"}], completions=[["21"]])

    def shown(order: str, seed: int = 0) -> list[tuple[str, int, str]]:
        (text,) = _asked(tmp_path / f"{order}{seed}", monkeypatch, judged, examples=str(file), examples_k=4,
                         examples_order=order, examples_seed=seed)
        return _examples(text)

    up, down = shown("ascending"), shown("descending")
    assert [lvl for d, lvl, _ in up if d == "brevity"] == [1, 1, 3, 5]
    assert [lvl for d, lvl, _ in down if d == "brevity"] == [5, 3, 1, 1]
    assert sorted(up) == sorted(down), "the order changes, not the examples"
    shuffled = [shown("shuffled", seed) for seed in (0, 0, 1, 2, 3)]
    assert shuffled[0] == shuffled[1], "seeded"
    assert sorted(shuffled[0]) == sorted(up), "seed 0 draws the same examples in another order"
    orders = {tuple(lvl for d, lvl, _ in s if d == "brevity") for s in shuffled}
    assert len(orders) > 1 and any(o != tuple(sorted(o)) for o in orders), "not always ascending"


def test_never_an_example_of_the_prompt_being_judged_and_the_same_examples_for_the_rest(tmp_path, monkeypatch):
    file = _labelling(tmp_path / "labels.jsonl")
    outside = Rollout(records=[{"prompt": "20+1=", "reference": "21"}], completions=[["21"]])
    (fixed,) = _asked(tmp_path / "fixed", monkeypatch, outside, examples=str(file), examples_k=2)
    taught = {p for _, _, p in _examples(fixed)}
    clash = sorted(taught)[0]
    rollout = Rollout(records=[{"prompt": clash, "reference": "0"}, {"prompt": "20+1=", "reference": "21"}],
                      completions=[["0", "1"], ["21", "22"]])
    asked = _asked(tmp_path / "both", monkeypatch, rollout, examples=str(file), examples_k=2)
    own = [text for text in asked if f"PROMPT:\n{clash}\n" in text]
    rest = [text for text in asked if "PROMPT:\n20+1=" in text]
    assert len(own) == 2 and len(rest) == 2
    for text in own:
        shown = _examples(text)
        assert clash not in {p for _, _, p in shown}
        assert all(sum(d == dim for d, _, _ in shown) == 2 for dim in ("format", "brevity"))  # replaced, still k
    for text in rest:  # every other completion: the run's fixed examples, the cached prefix
        assert text.split("PROMPT:\n20+1=")[0] == fixed.split("PROMPT:\n20+1=")[0]


def _validate(*overrides: str) -> int:
    # the examples are checked before the server is asked whether it answers: none needs to
    return main(["validate", "judge=llm", "judge.params.backend.name=openai",
                 "++judge.params.backend.params={base_url: 'http://127.0.0.1:9/v1'}", *overrides])


@pytest.mark.parametrize("case,expected", [
    ("other_rubric", WHERE + r".*labels\.jsonl:1: the line's dimensions do not match rubric "
                     r"arithmetic .*missing: brevity"),
    ("unlabelled", WHERE + r".*no labelled completion in the file"),
    ("negative_k", WHERE.replace("examples", "examples_k") + r"must be >= 0"),
    ("missing", WHERE + r"no such labelling file"),
])
def test_a_bad_examples_file_or_k_fails_validate_in_one_line(case, expected, tmp_path, capsys):
    file = tmp_path / "labels.jsonl"
    rubric = load_rubric(ARITHMETIC)
    line = labelling_line(prompt="1+1=", completion="2", rubric=rubric, step=0, window=0)
    if case == "other_rubric":
        line["dimensions"] = [d for d in line["dimensions"] if d["name"] != "brevity"]
        line["labels"] = {"format": 1, "correctness": 1, "repetition": 5}
    write_lines(file, [line])
    overrides = [f"judge.params.examples={file if case != 'missing' else tmp_path / 'nothing.jsonl'}"]
    if case == "negative_k":
        overrides.append("judge.params.examples_k=-1")
    code = _validate(*overrides)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0]
    assert re.search(expected, err[0]), err[0]


def test_calibrate_with_examples_on_held_out_labels(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    examples = _labelling(tmp_path / "examples.jsonl")
    heldout = tmp_path / "heldout.jsonl"  # other prompts than the examples': the numbers are held out
    rubric = load_rubric(ARITHMETIC)
    lines = []
    for prompt, completion in (("30+1=", "31"), ("30+2=", "33"), ("30+3=", "thirty-three")):
        line = labelling_line(prompt=prompt, completion=completion, rubric=rubric, step=0, window=0)
        line["labels"] = {"format": 1, "correctness": 1, "brevity": 5, "repetition": 5}
        lines.append(line)
    write_lines(heldout, lines)
    with CannedChatServer(lambda messages: ANSWER) as server:
        code = main(["calibrate", "judge=llm", "judge.params.backend.name=openai",
                     f"++judge.params.backend.params={{base_url: '{server.url}'}}",
                     f"judge.params.examples={examples}", "judge.params.examples_k=2",
                     f"calibrate.labels={heldout}", f"calibrate.output={tmp_path / 'out'}", "logger=csv"])
    assert code == 0, capsys.readouterr().err
    assert len(server.requests) == 3 and all("LABELLED EXAMPLES" in m[0]["content"] for m in server.requests)
    assert (tmp_path / "out" / "calibration.md").is_file()


def test_the_offline_tiny_judge_refuses_examples(tmp_path):
    from rlkit.core.errors import ParamError

    file = _labelling(tmp_path / "labels.jsonl")
    with pytest.raises(ParamError, match="no room for examples") as caught:
        load_registry().create("judge", "llm", {"backend": "tiny", "examples": str(file)})
    assert "judge.params.examples" in str(caught.value)
