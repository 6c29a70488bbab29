"""The blind comparison page in a real browser: headless Chromium (Debian's ``chromium``, driven by Playwright) compares
two runs' answers with keys and buttons, on a dimension too, goes back to change an answer, a second labeller follows;
then the file, the report printed at Ctrl-C and ``rlkit compare report`` are checked against the key."""

from __future__ import annotations

import json
import signal
import time

import pytest

from rlkit.cli import main
from rlkit.evaluation.blind_comparison import key_path, read_comparison
from rlkit.evaluation.comparison_report import report_path

pytestmark = pytest.mark.slow


def test_two_labellers_compare_two_runs_blind_in_the_browser(two_runs, tmp_path, serve_compare, browser_page, capsys):
    alpha, beta = two_runs
    out = tmp_path / "cmp" / "alpha_vs_beta.jsonl"
    assert main(["compare", str(alpha), str(beta), f"out={out}", "dimensions=correctness", "serve=false"]) == 0
    server = serve_compare(out)
    page = browser_page
    page.goto(server.page)
    page.fill("#name", "ann")
    page.click("#start")

    # item 1, 3+4=: the left answer, by key
    page.wait_for_selector("#prompt:text-is('3+4=')")
    assert page.inner_text("#reference") == "7"
    assert {page.inner_text("#left"), page.inner_text("#right")} == {"7", "The answer is 7"}
    html = page.content()
    for secret in (alpha.name, beta.name, str(tmp_path), out.name, "(end)"):
        assert secret not in html, f"{secret!r} shown to the labeller"
    page.keyboard.press("1")
    # item 2, 5+5=: buttons, right on correctness, then right overall
    page.wait_for_selector("#prompt:text-is('5+5=')")
    page.click("[data-dimension=correctness] button[data-choice=right]")
    page.wait_for_selector("[data-dimension=correctness] button.chosen[data-choice=right]")
    page.click("#overall button[data-choice=right]")
    # item 3, 9+9=: a tie by key; item 4, 12+5=: the right one by arrow, then back and changed to a tie
    page.wait_for_selector("#prompt:text-is('9+9=')")
    page.keyboard.press("t")
    page.wait_for_selector("#prompt:text-is('12+5=')")
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("#finished")
    page.keyboard.press("b")
    page.wait_for_selector("#overall button.chosen[data-choice=right]")
    page.click("#overall button[data-choice=tie]")
    page.wait_for_selector("#finished")
    page.wait_for_function("document.querySelector('#progress').textContent.includes('compared 4/4')")

    # the page showed 4/4 before the change too: wait (bounded) for the changed answer to reach the file
    deadline = time.monotonic() + 15
    while [line["preferences"]["ann"] for line in read_comparison(out)][3] != {"overall": "tie"}:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    lines = read_comparison(out)
    ann = [line["preferences"]["ann"] for line in lines]
    assert ann == [{"overall": "left"}, {"correctness": "right", "overall": "right"}, {"overall": "tie"},
                   {"overall": "tie"}]

    # a reload: everything done, the name remembered; then bob on the same browser, from the first item
    page.reload()
    page.wait_for_selector("#finished")
    page.click("#rename")
    page.fill("#name", "bob")
    page.keyboard.press("Enter")
    page.wait_for_selector("#prompt:text-is('3+4=')")
    assert "compared 0/4" in page.inner_text("#progress") and "labeller: bob" in page.inner_text("header")
    for key, prompt in (("2", "5+5="), ("2", "9+9="), ("s", "12+5=")):
        page.keyboard.press(key)
        page.wait_for_selector(f"#prompt:text-is('{prompt}')")
    page.keyboard.press("1")
    page.wait_for_selector("#finished")
    page.wait_for_function("document.querySelector('#progress').textContent.includes('compared 4/4')")

    # the report, through the key: each side clicked becomes run A (alpha) or B (beta)
    a_left = json.loads(key_path(out).read_text())["a_left"]
    lines = read_comparison(out)

    def run(line: dict, who: str) -> str | None:
        choice = line["preferences"][who]["overall"]
        return None if choice is None else "tie" if choice == "tie" else "A" if (choice == "left") == a_left[
            line["item"]] else "B"

    ann_sides, bob_sides = [run(line, "ann") for line in lines], [run(line, "bob") for line in lines]
    assert bob_sides[2] is None and ann_sides[2:] == ["tie", "tie"]
    server.proc.send_signal(signal.SIGINT)  # Ctrl-C: the page stops and prints the report
    printed = server.proc.stdout.read()
    assert server.stop() == 0
    assert "A win rate [95% CI]" in printed and "agreement ann – bob" in printed
    report = json.loads(report_path(out).read_text())
    for who, sides in (("ann", ann_sides), ("bob", bob_sides)):
        row = report["labellers"][who]
        assert (row["a_wins"], row["b_wins"], row["ties"]) == (sides.count("A"), sides.count("B"), sides.count("tie"))
    both = [(x, y) for x, y in zip(ann_sides, bob_sides, strict=True) if x and y]
    assert report["agreement"][0]["n"] == len(both) == 3
    assert report["agreement"][0]["same"] == pytest.approx(sum(x == y for x, y in both) / 3, abs=1e-4)
    assert report["dimensions"]["correctness"]["n"] == 1
    capsys.readouterr()
    assert main(["compare", "report", str(out)]) == 0
    assert json.loads(report_path(out).read_text()) == report
