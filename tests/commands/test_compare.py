"""``rlkit compare``: answers paired by prompt with each item's side drawn at random and never shown, the report's
arithmetic against numbers worked out by hand, the page over real HTTP, and bad input as one error line."""

from __future__ import annotations

import json
import math
import shutil
import signal
from pathlib import Path

import httpx
import pytest

from rlkit.cli import main
from rlkit.evaluation.blind_comparison import (
    Side,
    key_path,
    line_key,
    pair_answers,
    parse_side,
    read_comparison,
)
from rlkit.evaluation.comparison_report import comparison_report, report_path, wilson_interval


def build(tmp_path: Path, *sides: Path | str, **options: str) -> Path:
    out = tmp_path / "cmp" / "comparison.jsonl"
    args = [f"{k}={v}" for k, v in {"out": out, "serve": "false", **options}.items()]
    assert main(["compare", *(str(s) for s in sides), *args]) == 0
    return out


# --- pairing and the draw of sides ----------------------------------------------------------------------------------


def answers(texts: dict[str, str]) -> list[dict]:
    return [{"prompt": p, "completion": c} for p, c in texts.items()]


def test_each_items_side_is_drawn_at_random_and_the_same_for_the_same_seed():
    a, b = Side("A", Path("a.jsonl"), None), Side("B", Path("b.jsonl"), None)
    a_rows = answers({f"{i}+1=": str(i + 1) for i in range(200)})
    b_rows = answers({f"{i}+1=": f"{i + 1}!" for i in range(200)})
    first = pair_answers(a, a_rows, b, b_rows, seed=0)
    lefts = list(first.key["a_left"].values())
    # 200 fair draws: A on the left 100 ± 30 times (more than 4 standard deviations, sqrt(200)/2 = 7.1, either way)
    assert 70 <= sum(lefts) <= 130
    assert pair_answers(a, a_rows, b, b_rows, seed=0).key == first.key, "the same seed draws the same sides"
    assert pair_answers(a, a_rows, b, b_rows, seed=1).key["a_left"] != first.key["a_left"]
    for line in first.lines:  # the key says where A's answer went, and the texts agree
        a_text = line["left"] if first.key["a_left"][line["item"]] else line["right"]
        assert not a_text.endswith("!") and line["left"] != line["right"]
        assert set(line) == {"item", "prompt", "left", "right", "dimensions", "preferences"}


def test_prompts_are_matched_and_what_one_side_lacks_or_both_share_is_left_out():
    a, b = Side("A", Path("a.jsonl"), None), Side("B", Path("b.jsonl"), None)
    a_rows = answers({"1+1=": "2", "2+2=": "4", "3+3=": "6", "only A=": "x"})
    b_rows = answers({"3+3=": "7", "2+2=": "4", "1+1=": "two", "only B=": "y", "also B=": "z"})
    pairing = pair_answers(a, a_rows, b, b_rows, seed=0)
    assert [line["prompt"] for line in pairing.lines] == ["1+1=", "3+3="]  # A's order; 2+2= answered alike
    assert pairing.identical == 1 and pairing.only_a == ["only A="] and pairing.only_b == ["only B=", "also B="]
    assert pairing.key["identical"] == 1 and pairing.key["only_b"] == 2


def test_a_side_is_a_runs_end_its_start_or_an_answers_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    file = tmp_path / "answers.jsonl"
    file.write_text('{"prompt": "1+1=", "completion": "2"}\n')
    assert (parse_side(str(run)).when, parse_side(f"{run}@start").when, parse_side(f"{run}@end").when) == \
        ("end", "start", "end")
    assert parse_side(str(file)).when is None and parse_side(str(file)).path == file
    odd = tmp_path / "run@v2"  # a folder whose name holds an @
    odd.mkdir()
    assert parse_side(str(odd)).path == odd and parse_side(f"{odd}@start") == Side(f"{odd}@start", odd, "start")


def test_the_file_and_the_page_never_say_which_run_wrote_which(two_runs, tmp_path, serve_compare, capsys):
    alpha, beta = two_runs
    names = (alpha.name, beta.name)
    out = build(tmp_path, alpha, beta)
    printed = capsys.readouterr().out
    assert "4 prompts to compare blind" in printed and "2 answered alike, left out" in printed
    text = out.read_text()
    for secret in (*names, str(tmp_path), "(end)", "a_left"):
        assert secret not in text, f"{secret!r} in the comparison file"
    key = json.loads(key_path(out).read_text())
    assert key["A"] == f"{alpha} (end)" and key["B"] == f"{beta} (end)"
    assert sorted(line["item"] for line in read_comparison(out)) == sorted(key["a_left"])

    server = serve_compare(out)
    page = httpx.get(server.url + "/")
    items = httpx.get(f"{server.url}/api/items", params={"labeller": "ann"}, headers=server.auth)
    assert page.status_code == 200 and "rlkit blind comparison" in page.text and items.status_code == 200
    for secret in (*names, str(tmp_path), out.name, key_path(out).name, "(end)", "a_left", '"A"', '"B"'):
        assert secret not in page.text and secret not in items.text, f"{secret!r} sent to the browser"
    shown = items.json()["items"]
    assert [i["prompt"] for i in shown] == ["3+4=", "5+5=", "9+9=", "12+5="]
    assert {frozenset((i["left"], i["right"])) for i in shown} == {
        frozenset(pair) for pair in [("7", "The answer is 7"), ("10", "10 (five and five)"), ("18", "eighteen"),
                                     ("16", "17")]}
    assert shown[0]["reference"] == "7" and items.json()["progress"] == {"done": 0, "total": 4}


def test_one_run_alone_is_compared_end_against_start(two_runs, tmp_path, capsys):
    alpha, _ = two_runs
    assert main(["compare", str(alpha), "serve=false"]) == 0
    out = alpha / "comparisons" / "end_vs_start.jsonl"
    key = json.loads(key_path(out).read_text())
    assert key["A"] == f"{alpha} (end)" and key["B"] == f"{alpha} (start)"
    # start 5,7,11,13,19,17 and end 4,7,10,13,18,16: four prompts differ
    assert [line["prompt"] for line in read_comparison(out)] == ["2+2=", "5+5=", "9+9=", "12+5="]


# --- the report's arithmetic ----------------------------------------------------------------------------------------


def test_the_wilson_interval_matches_hand_computed_values():
    # 14 wins, 6 losses: p = 0.7, n = 20, z = 1.959964, z^2/n = 0.192073;
    # centre = (0.7 + 0.096036) / 1.192073 = 0.667777; half = 1.959964 / 1.192073 * sqrt(0.21/20 + 3.841459/1600)
    #        = 1.644163 * 0.113582 = 0.186748  ->  [0.4810, 0.8545]
    low, high = wilson_interval(14, 20)
    assert low == pytest.approx(0.4810, abs=1e-4) and high == pytest.approx(0.8545, abs=1e-4)
    # 20 of 20: centre 1.096036 / 1.192073 = 0.919436, half 1.644163 * 0.049 = 0.080562 -> [0.8389, 1]
    low, high = wilson_interval(20, 20)
    assert low == pytest.approx(0.8389, abs=1e-4) and high == 1.0
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def _line(item: str, **given: dict) -> dict:
    return {"item": item, "prompt": f"{item}?", "left": "l", "right": "r", "dimensions": ["correctness"],
            "preferences": given}


def test_the_report_counts_each_labeller_and_each_item_once_by_majority():
    key = {"A": "run-a (end)", "B": "run-b (end)", "identical": 3,
           "a_left": {"i1": True, "i2": False, "i3": True, "i4": False, "i5": True}}
    lines = [_line("i1", ann={"overall": "left", "correctness": "left"}, bob={"overall": "left"},
                   cat={"overall": "right"}),                                 # A, A, B -> A
             _line("i2", ann={"overall": "left"}, bob={"overall": "right"}),  # B, A -> tie
             _line("i3", ann={"overall": "right", "correctness": "left"}, bob={"overall": "right"}),  # B, B -> B
             _line("i4", ann={"overall": "tie"}, bob={"overall": "tie"}),      # tie
             _line("i5", ann={"overall": "left"}, bob={"overall": None})]      # A (bob skipped)
    report = comparison_report(lines, key)
    overall = report["overall"]
    assert (overall["n"], overall["a_wins"], overall["b_wins"], overall["ties"]) == (5, 2, 1, 2)
    # 2 of 3: centre (0.666667 + 0.640243) / 2.280486 = 0.573084, half 0.859449 * sqrt(0.074074 + 0.106707)
    #        = 0.365424 -> [0.2077, 0.9385]
    assert overall["a_win_rate"] == pytest.approx(0.6667, abs=1e-4) and overall["tie_share"] == 0.4
    assert overall["interval"] == pytest.approx([0.2077, 0.9385], abs=1e-4)
    assert {n: (r["a_wins"], r["b_wins"], r["ties"]) for n, r in report["labellers"].items()} == \
        {"ann": (2, 2, 1), "bob": (2, 1, 1), "cat": (0, 1, 0)}
    assert report["dimensions"]["correctness"]["a_wins"] == 2 and report["dimensions"]["correctness"]["n"] == 2
    assert report["left_chosen"] == {"left": 4, "n": 8, "share": 0.5}
    pairs = {tuple(r["labellers"]): r for r in report["agreement"]}
    # ann and bob on i1-i4, scale B=0 tie=1 A=2: ann 2,0,0,1 and bob 2,2,0,1. Quadratic weights (i-j)^2/4: observed
    # disagreement 1 (i2); expected from the margins (ann 1,1,2; bob 2,1,1) 6.5/4 = 1.625; kappa = 1 - 1/1.625 = 5/13
    assert pairs["ann", "bob"]["n"] == 4 and pairs["ann", "bob"]["same"] == 0.75
    assert pairs["ann", "bob"]["kappa"] == pytest.approx(5 / 13, abs=1e-4)
    assert pairs["ann", "cat"]["n"] == 1 and pairs["ann", "cat"]["same"] == 0
    assert report["identical_left_out"] == 3 and report["answered"] == 5


# --- the page over HTTP ---------------------------------------------------------------------------------------------


def prefer(server, item: dict, choice, labeller: str = "ann", what: str = "overall", key: str | None = None):
    body = {"labeller": labeller, "item": item["number"], "key": key or item["key"], "what": what, "choice": choice}
    return httpx.post(f"{server.url}/api/prefer", json=body, headers=server.auth)


def test_preferences_are_saved_per_labeller_and_the_report_follows_the_key(two_runs, tmp_path, serve_compare):
    out = build(tmp_path, *two_runs, dimensions="correctness", seed="3")
    server = serve_compare(out)
    items = httpx.get(f"{server.url}/api/items", params={"labeller": "ann"}, headers=server.auth).json()["items"]
    assert all(i["dimensions"] == ["correctness"] for i in items)
    key = json.loads(key_path(out).read_text())["a_left"]
    lines = read_comparison(out)

    def side_of(run: str, n: int) -> str:  # the side the page shows run "A" (alpha) or "B" on for item n
        a_left = key[lines[n]["item"]]
        return "left" if (run == "A") == a_left else "right"

    # ann prefers alpha on three items and ties the fourth; bob prefers beta on the first and skips the rest
    for n, choice in enumerate([side_of("A", 0), side_of("A", 1), side_of("A", 2), "tie"]):
        response = prefer(server, items[n], choice)
        assert response.status_code == 200, response.text
    assert prefer(server, items[0], side_of("A", 0), what="correctness").status_code == 200
    assert prefer(server, items[0], side_of("B", 0), labeller="bob").json()["progress"] == {"done": 1, "total": 4}
    assert prefer(server, items[1], None, labeller="bob").status_code == 200

    saved = read_comparison(out)
    assert saved[0]["preferences"] == {"ann": {"overall": side_of("A", 0), "correctness": side_of("A", 0)},
                                       "bob": {"overall": side_of("B", 0)}}
    assert saved[1]["preferences"]["bob"] == {"overall": None}

    # refused: no token, a choice that is not one, a dimension the item lacks, an item replaced under the page
    assert httpx.get(f"{server.url}/api/items", params={"labeller": "ann"}).status_code == 401
    bad = prefer(server, items[0], "A")
    assert bad.status_code == 422 and "'A' is not left, right or tie" in bad.json()["detail"]
    assert prefer(server, items[0], "left", what="brevity").status_code == 422
    stale = prefer(server, items[0], "left", key="0" * 16)
    assert stale.status_code == 409 and "reload the page" in stale.json()["detail"]
    assert line_key(read_comparison(out)[0]) == items[0]["key"] and read_comparison(out) == saved, "nothing changed"

    server.proc.send_signal(signal.SIGINT)  # Ctrl-C: the page stops and the report is printed
    printed = server.proc.stdout.read()
    assert server.stop() == 0
    assert "everyone" in printed and "labellers' majority" in printed and "report written to" in printed
    report = json.loads(report_path(out).read_text())
    # majority per item: item 1 A vs B -> tie, items 2 and 3 A (bob's skip is no answer), item 4 tie
    assert (report["overall"]["a_wins"], report["overall"]["b_wins"], report["overall"]["ties"]) == (2, 0, 2)
    assert report["labellers"]["ann"]["a_wins"] == 3 and report["labellers"]["bob"]["b_wins"] == 1
    assert report["dimensions"]["correctness"]["a_wins"] == 1
    assert report["agreement"] == [{"labellers": ["ann", "bob"], "n": 1, "same": 0.0, "kappa": 0.0}]
    assert report["A"] == f"{two_runs[0]} (end)" and report["B"] == f"{two_runs[1]} (end)"


def test_the_same_command_again_goes_on_with_the_file_and_its_answers(two_runs, tmp_path, capsys):
    out = build(tmp_path, *two_runs)
    lines = read_comparison(out)
    lines[0]["preferences"] = {"ann": {"overall": "tie"}}
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert build(tmp_path, *two_runs) == out
    assert read_comparison(out)[0]["preferences"] == {"ann": {"overall": "tie"}}, "answers kept"
    assert main(["compare", "report", str(out)]) == 0
    assert "A win rate [95% CI]" in capsys.readouterr().out
    assert json.loads(report_path(out).read_text())["overall"]["ties"] == 1


# --- bad input: one line, exit 2, nothing written -------------------------------------------------------------------


def _bad_line_run(root: Path, a: Path) -> Path:
    run = Path(shutil.copytree(a, root / "broken"))
    answers = run / "heldout_samples.jsonl"
    answers.write_text(answers.read_text().splitlines()[0] + '\n{"prompt": "3+4=", "completion": \n')
    return run


def _comparison_with(root: Path, line: str, key: bool = True) -> Path:
    path = root / "bad" / "comparison.jsonl"
    path.parent.mkdir()
    path.write_text('{"item": "i1", "prompt": "1+1=", "left": "2", "right": "two", "dimensions": [], '
                    '"preferences": {}}\n' + line + "\n")
    if key:
        key_path(path).write_text(json.dumps({"A": "a", "B": "b", "a_left": {"i1": True, "i2": False}}))
    return path


BAD = [
    ("missing run", lambda r, a, b: ["compare", str(r / "missing")], "missing: no such run directory"),
    ("no answers", lambda r, a, b: ["compare", str((r / "empty").mkdir() or r / "empty"), str(b)],
     "empty: no held-out answers (heldout_samples.jsonl)"),
    ("bad answer line", lambda r, a, b: ["compare", str(_bad_line_run(r, a)), str(b)], "heldout_samples.jsonl:2: "),
    ("no completion", lambda r, a, b: ["compare", str(a), str(_file(r, '{"prompt": "2+2="}'))],
     'answers.jsonl:1: missing "completion"'),
    ("nothing in common", lambda r, a, b: ["compare", str(a), str(_file(r, '{"prompt": "8+8=", "completion": "16"}'))],
     "nothing to compare with"),
    ("missing file side", lambda r, a, b: ["compare", str(a), str(r / "theirs.jsonl")], "theirs.jsonl: no such"),
    ("at what", lambda r, a, b: ["compare", f"{a}@mid", str(b)], "after @ comes start or end"),
    ("unknown option", lambda r, a, b: ["compare", str(a), str(b), "colour=red"], "rlkit compare colour: unknown"),
    ("three sides", lambda r, a, b: ["compare", str(a), str(b), str(a)], "rlkit compare: usage: rlkit compare"),
    ("one side with @", lambda r, a, b: ["compare", f"{a}@start"], "one run alone compares its end"),
    ("unknown dimension", lambda r, a, b: ["compare", str(a), str(b), "dimensions=kindness"],
     "rlkit compare dimensions: kindness: the run's dimensions are correctness, brevity"),
    ("unwritable out", lambda r, a, b: ["compare", str(a), str(b), f"out={_file(r, 'x')}/cmp.jsonl"],
     "rlkit compare out: cannot create"),
    ("other comparison", lambda r, a, b: ["compare", str(a), str(b), f"out={_other(r, a, b)}", "seed=9"],
     "holds another comparison"),
    ("missing file", lambda r, a, b: ["compare", "report", str(r / "missing.jsonl")], "no such comparison file"),
    ("bad file line", lambda r, a, b: ["compare", "report", str(_comparison_with(r, '{"item": "i2"'))],
     "comparison.jsonl:2: "),
    ("bad choice", lambda r, a, b: ["compare", "serve", str(_comparison_with(
        r, '{"item": "i2", "prompt": "2+2=", "left": "4", "right": "5", "preferences": {"ann": {"overall": "A"}}}'))],
     "comparison.jsonl:2: \"preferences\".\"ann\".\"overall\": 'A' is not left, right, tie or null"),
    ("no key", lambda r, a, b: ["compare", "report", str(_comparison_with(
        r, '{"item": "i2", "prompt": "2+2=", "left": "4", "right": "5"}', key=False))], "no key for comparison.jsonl"),
    ("nothing answered", lambda r, a, b: ["compare", "report", str(_comparison_with(
        r, '{"item": "i2", "prompt": "2+2=", "left": "4", "right": "5"}'))], "nothing answered yet"),
]


def _file(root: Path, line: str) -> Path:
    path = root / "answers.jsonl"
    path.write_text(line + "\n")
    return path


def _other(root: Path, a: Path, b: Path) -> Path:
    out = root / "other" / "comparison.jsonl"
    assert main(["compare", str(a), str(b), f"out={out}", "serve=false"]) == 0
    return out


@pytest.mark.parametrize(("argv", "expected"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_input_is_one_error_line_and_exit_2(two_runs, tmp_path, capsys, argv, expected):
    alpha, beta = two_runs
    args = argv(tmp_path, alpha, beta)
    before = {p for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("rlkit: error: ") and "Traceback" not in err, err
    assert expected in lines[0], lines[0]
    assert {p for p in tmp_path.rglob("*") if p.is_file()} == before, "nothing written"


@pytest.mark.slow
def test_compare_reads_the_held_out_answers_rlkit_fit_writes(tmp_path, monkeypatch, capsys):
    from rlkit.runs.heldout_answers import read_heldout_answers

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "outputs" / "run"
    assert main(["fit", "logger=csv", "batch_size=4", "num_generations=2", "trainer.max_steps=1",
                 f"hydra.run.dir={run}"]) == 0
    start, end = read_heldout_answers(run, "start"), read_heldout_answers(run, "end")
    assert [r["prompt"] for r in start] == [r["prompt"] for r in end] and len(start) >= 4
    assert {r["step"] for r in start} == {0} and {r["step"] for r in end} == {1}
    assert set(start[0]["scores"]) == {"format", "correctness", "brevity", "repetition"} and "reference" in start[0]
    # the run's start against answers that differ on every prompt: each prompt once, however often the split holds it
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"prompt": r["prompt"], "completion": r["completion"] + " or so"}) + "\n"
                             for r in end))
    out = build(tmp_path, f"{run}@start", other)
    assert len(read_comparison(out)) == len({r["prompt"] for r in start})
    assert json.loads(key_path(out).read_text())["A"] == f"{run} (start)"
