"""``rlkit label`` ranking groups in a pseudo-terminal: the completions numbered in the order the page shows the same
labeller, an order with a tie typed and saved as the page saves it (``rankings``), a bad order asked again with one
line, a skip, the login name as the default labeller; then ``rlkit calibrate judge=ranking`` on the file reports the
typed order's agreement with the judge."""

from __future__ import annotations

import math
import re

import pytest
from test_label import Terminal  # the pseudo-terminal driver of the per-dimension tests, same folder

from rlkit.cli import main
from rlkit.evaluation.labelling import group_line, read_labelling, write_lines
from rlkit.serve.labelling_page import page_item
from rlkit.testing.canned_chat import CannedChatServer

PANEL = re.compile(r"╭─ (\d+) ─+╮\n│ (.*?) *│\n")


@pytest.fixture
def groups(tmp_path, arithmetic):
    """Two groups to rank: four completions (ranked in the test), three (skipped)."""
    path = tmp_path / "ranking_set.jsonl"
    write_lines(path, [
        group_line(prompt="7+1=", completions=["8", "It is 8.", "9", "eight"], reference="8", rubric=arithmetic,
                   step=10, window=10, rewards=[0.987654, 0.5, 0.1, 0.3]),
        group_line(prompt="2+2=", completions=["4", "5", "four"], rubric=arithmetic, step=20, window=20)])
    return path


def shown_texts(screen: str) -> list[str]:
    """The completions as the terminal numbered them: the text of panel 1, 2, ..."""
    panels = PANEL.findall(screen)
    assert [int(n) for n, _ in panels] == list(range(1, len(panels) + 1)), screen
    return [text for _, text in panels]


def test_ranking_a_group_in_the_terminal_is_what_calibrate_holds_the_judge_to(groups, tmp_path, capsys,
                                                                                use_judge_cache):
    first = read_labelling(groups)[0]
    term = Terminal("label", str(groups), "labeller=tom")
    screen = term.expect("order of 1–4, best first")
    assert "line 1 of 2" in screen and "rank 4 completions" in screen and "7+1=" in screen and "reference" in screen
    assert "rank by" in screen and "correctness" in screen and "brevity" in screen
    assert "0.987654" not in screen, "the run's rewards are never shown to the labeller"
    texts = shown_texts(screen)
    shown = page_item(1, first, "tom", 0)["shown"]
    assert texts == [first["completions"][i] for i in shown], "the page's order for tom, not the file's"
    place = {text: texts.index(text) + 1 for text in texts}  # completion text -> number typed

    term.type(f"{place['8']} {place['It is 8.']} {place['It is 8.']}")  # a number twice, two missing
    said = term.expect("order of 1–4, best first")
    assert f"{place['It is 8.']} twice" in said and "missing" in said
    assert read_labelling(groups)[0]["ranking"] is None, "a bad order saves nothing"
    # 8 best, "It is 8." and "eight" tied, 9 last
    term.type(f"{place['8']} {place['It is 8.']}={place['eight']} {place['9']}")
    screen = term.expect("order of 1–3, best first")
    assert "line 2 of 2" in screen and "2+2=" in screen
    ranked = read_labelling(groups)[0]
    assert ranked["rankings"] == {"tom": [[0], [1, 3], [2]]} and ranked["ranking"] == [[0], [1, 3], [2]]
    assert ranked["ranked_by"] == "tom"
    term.type("s")
    done = term.expect(f"calibrate judge=ranking calibrate.labels={groups}")
    assert "all 2 groups ranked (as tom)" in done
    assert term.wait() == 0
    skipped = read_labelling(groups)[1]
    assert skipped["rankings"] == {"tom": None} and skipped["ranking"] is None

    term = Terminal("label", str(groups), "labeller=tom")  # nothing left for tom
    assert "line 1 of 2" not in term.expect("all 2 groups ranked (as tom)")
    assert term.wait() == 0

    # the judge (one repetition, labels in file order) puts 1 first, then 0, 2, 3: scores 2/3, 1, 1/3, 0. Against
    # the typed 0 > 1 = 3 > 2: of the 5 pairs in different tiers it agrees on (0,2), (0,3) and (1,2), and half of
    # nothing else: 3/5; a wrong number-to-completion mapping would give another figure
    use_judge_cache(tmp_path / "cache")
    capsys.readouterr()
    with CannedChatServer(lambda messages: "B > A > C > D") as server:
        code = main(["calibrate", "judge=ranking", f"calibrate.labels={groups}", f"calibrate.output={tmp_path / 'out'}",
                     "judge.params.repetitions=1", "judge.params.backend.name=openai",
                     f"++judge.params.backend.params={{base_url: '{server.url}', max_retries: 0}}", "logger=csv"])
        assert code == 0, capsys.readouterr().err
    assert "ranking judge ranking vs human rankings — 1 groups" in capsys.readouterr().out
    report = (tmp_path / "out" / "ranking.md").read_text()
    assert f"| judge ranking – humans | 1 | 5 | 1 | 0.600 | {1 / math.sqrt(30):.3f} |" in report


def test_the_login_name_ranks_when_no_labeller_is_named(groups, monkeypatch):
    monkeypatch.setenv("LOGNAME", "maria")  # getpass reads LOGNAME first
    term = Terminal("label", str(groups))
    texts = shown_texts(term.expect("order of 1–4, best first"))
    term.type(" = ".join(str(n) for n in range(1, len(texts) + 1)))  # all four tied
    term.expect("order of 1–3")
    term.type("q")
    term.expect(f"saved; run `rlkit label {groups}` to go on")
    assert term.wait() == 0
    first, second = read_labelling(groups)
    assert first["rankings"] == {"maria": [sorted(range(4), key=lambda i: texts.index(first["completions"][i]))]}
    assert "rankings" not in second, "quit before answering: nothing saved"


def test_bad_options_are_one_error_line(groups, capsys):
    assert main(["label", str(groups), "labeler=tom"]) == 2
    assert "rlkit label labeler" in capsys.readouterr().err
    assert main(["label", str(groups), "seed=x"]) == 2
    assert "must be a whole number" in capsys.readouterr().err
    assert main(["label", str(groups), "labeller= "]) == 2
    assert "a name of 1 to 80 characters" in capsys.readouterr().err
