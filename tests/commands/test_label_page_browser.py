"""The labelling page in a real browser: headless Chromium (Debian's ``chromium``, driven by Playwright) labels three
completions with keys and buttons, goes back to change an answer, ranks a group with a tie, then the file is checked
and ``rlkit calibrate`` reads it."""

from __future__ import annotations

import pytest

from rlkit.cli import main
from rlkit.evaluation.labelling import read_labelling

pytestmark = pytest.mark.slow


def test_label_three_completions_and_rank_a_group_in_the_browser(labelling, serve_page, browser_page, tmp_path,
                                                                  capsys, monkeypatch):
    server = serve_page(labelling)
    page = browser_page
    page.goto(server.page)
    page.fill("#name", "ann")
    page.click("#start")

    # line 1, "4" for 2+2=: keys for format and correctness, a button for brevity, skip repetition
    page.wait_for_selector("#completion:text-is('4')")
    assert page.inner_text("#prompt") == "2+2=" and page.inner_text("#reference") == "4"
    assert "Just the number" in page.inner_text("[data-dimension=brevity]")
    assert "0.123456" not in page.content() and "0.987654" not in page.content(), "the judge is never shown"
    page.keyboard.press("1")
    page.wait_for_selector("[data-dimension=correctness].current")
    page.keyboard.press("1")
    page.click("[data-dimension=brevity] button[data-level='5']")
    page.wait_for_selector("[data-dimension=repetition].current")
    page.click("#skip")

    # line 2, "The answer is 7" for 3+3=: a wrong key, then back to change correctness
    page.wait_for_selector("#completion:text-is('The answer is 7')")
    assert page.locator("#reference").count() == 1
    page.keyboard.press("0")  # format
    page.wait_for_selector("[data-dimension=correctness].current")
    page.keyboard.press("7")  # not a level of a binary dimension: nothing happens
    page.keyboard.press("1")  # correctness, by mistake
    page.wait_for_selector("[data-dimension=brevity].current")
    page.keyboard.press("b")
    page.wait_for_selector("[data-dimension=correctness].current")
    page.keyboard.press("0")
    page.wait_for_selector("[data-dimension=brevity].current")
    page.keyboard.press("3")
    page.wait_for_selector("[data-dimension=repetition].current")
    page.keyboard.press("5")

    # line 3: buttons only
    page.wait_for_selector("#completion:text-is('10, since five and five make ten')")
    for dimension, level in (("format", 1), ("correctness", 1), ("brevity", 1), ("repetition", 4)):
        page.wait_for_selector(f"[data-dimension={dimension}].current")
        page.click(f"[data-dimension={dimension}] button[data-level='{level}']")
    page.wait_for_function("document.querySelector('#progress').textContent.includes('labelled 3/3')")

    # the group, shuffled: "8" first, "It is 8." and "eight" tied, "9" last
    page.wait_for_selector(".card")
    letter = {page.inner_text(f".card[data-letter={k}] pre"): k for k in "ABCD"}
    assert set(letter) == {"8", "It is 8.", "9", "eight"}
    page.keyboard.press(letter["8"].lower())
    page.click(f".card[data-letter={letter['It is 8.']}] button.next")
    page.keyboard.press(f"Shift+{letter['eight']}")
    assert page.inner_text(f".card[data-letter={letter['eight']}] .place") == "#2 (tie)"
    page.keyboard.press(letter["9"].lower())
    assert page.inner_text("#order").split() == [letter["8"], ">", letter["It is 8."], "=", letter["eight"], ">",
                                                 letter["9"]]
    page.keyboard.press("Enter")
    page.wait_for_selector("#finished")
    page.wait_for_function("document.querySelector('#progress').textContent.includes('groups ranked 1/1')")

    first, second, third, group = read_labelling(labelling)
    assert first["labellers"]["ann"] == {"format": 1, "correctness": 1, "brevity": 5, "repetition": None}
    assert second["labels"] == {"format": 0, "correctness": 0, "brevity": 3, "repetition": 5}
    assert third["labels"] == {"format": 1, "correctness": 1, "brevity": 1, "repetition": 4}
    assert {line["labelled_by"]["format"] for line in (first, second, third)} == {"ann"}
    assert group["ranking"] == [[0], [1, 3], [2]] and group["ranked_by"] == "ann"

    # a reload starts where the labeller stopped: everything done, the name remembered
    page.reload()
    page.wait_for_selector("#finished")
    # another labeller on the same browser: starts from the first line, with only his own answers counted
    page.click("#rename")
    page.fill("#name", "bob")
    page.keyboard.press("Enter")
    page.wait_for_selector("#completion:text-is('4')")
    assert "labelled 0/3" in page.inner_text("#progress") and "labeller: bob" in page.inner_text("header")

    monkeypatch.setenv("WANDB_SILENT", "true")
    capsys.readouterr()
    out = tmp_path / "calibration"
    assert main(["calibrate", f"calibrate.labels={labelling}", f"calibrate.output={out}", "logger=csv"]) == 0
    printed = capsys.readouterr().out
    assert "3 completions" in printed
    report = (out / "calibration.md").read_text()
    assert "| correctness | binary | 0–1 | 3 |" in report


def test_rank_by_dragging_and_skip_a_group(tmp_path, make_lines, serve_page, browser_page):
    from rlkit.evaluation.labelling import write_lines

    group = make_lines()[3]
    path = tmp_path / "groups.jsonl"
    write_lines(path, [group, {**group, "prompt": "8+1=", "completions": ["9", "nine"]}])
    server = serve_page(path)
    page = browser_page
    page.goto(server.page)
    page.fill("#name", "tom")
    page.click("#start")
    page.wait_for_selector(".card")
    assert page.locator("#completion").count() == 0 and page.locator(".card").count() == 4
    card = {page.inner_text(f".card[data-letter={k}] pre"): f".card[data-letter={k}]" for k in "ABCD"}
    page.drag_and_drop(card["9"], "#drop")  # dropped on the box: the next place
    page.drag_and_drop(card["eight"], "#order")  # dropped on the order: tied with the last place
    page.drag_and_drop(card["It is 8."], "#drop")
    page.drag_and_drop(card["8"], "#drop")
    page.keyboard.press("Backspace")  # "8" out again
    page.drag_and_drop(card["8"], "#drop")
    page.click("#save")
    page.wait_for_selector(".card:has-text('nine')")
    page.keyboard.press("ArrowRight")  # skip the second group
    page.wait_for_selector("#finished")
    page.wait_for_function("document.querySelector('#progress').textContent.includes('groups ranked 2/2')")
    first, second = read_labelling(path)
    assert first["rankings"] == {"tom": [[2, 3], [1], [0]]}  # a deliberate bad order, as tom gave it
    assert second["rankings"] == {"tom": None} and second["ranking"] is None
