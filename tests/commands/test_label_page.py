"""``rlkit label serve`` over real HTTP (uvicorn on a loopback port, driven with httpx): what the page is sent, answers
saved in the format ``rlkit label`` writes, and bad input — no token, a level out of range, a wrong file, a stale
line, two pages on one file — each one clear message with nothing lost."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from rlkit.cli import main
from rlkit.evaluation.calibration import read_labels
from rlkit.evaluation.labelling import read_labelling, write_lines
from rlkit.evaluation.labelling_answers import apply_label, apply_ranking, line_key, save_answer


def tasks(server, labeller: str = "ann") -> dict:
    response = httpx.get(f"{server.url}/api/tasks", params={"labeller": labeller}, headers=server.auth)
    assert response.status_code == 200, response.text
    return response.json()


def label(server, line: int, dimension: str, level, labeller: str = "ann", key: str | None = None):
    body = {"labeller": labeller, "line": line, "dimension": dimension, "level": level}
    if key is not None:
        body["key"] = key
    return httpx.post(f"{server.url}/api/label", json=body, headers=server.auth)


def test_the_page_gets_what_to_label_and_never_the_judges_numbers(labelling, serve_page):
    server = serve_page(labelling)
    assert "ssh -N -L" in server.printed and "127.0.0.1" in server.printed
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and "rlkit labelling" in page.text  # the page itself holds no data: no token
    state = tasks(server)
    raw = json.dumps(state)
    assert "0.123456" not in raw and "4.56789" not in raw and "0.987654" not in raw, "judge scores never sent"
    first, group = state["items"][0], state["items"][3]
    assert first["kind"] == "label" and first["prompt"] == "2+2=" and first["reference"] == "4"
    brevity = {d["name"]: d for d in first["dimensions"]}["brevity"]
    assert [lv["level"] for lv in brevity["levels"]] == [1, 2, 3, 4, 5]
    assert brevity["levels"][4]["anchor"] == "Just the number" and brevity["description"]
    assert group["kind"] == "rank" and sorted(group["shown"]) == [0, 1, 2, 3] and group["order"] is None
    assert state["progress"] == {"done": 0, "total": 3, "groups": {"done": 0, "total": 1},
                                 "dimensions": {n: {"done": 0, "total": 3}
                                                for n in ("format", "correctness", "brevity", "repetition")}}
    assert server.stop() == 0, "Ctrl-C stops it cleanly"


def test_answers_are_saved_in_the_terminal_format_with_the_labellers_name(labelling, serve_page, arithmetic):
    server = serve_page(labelling)
    assert label(server, 1, "correctness", 1).status_code == 200
    response = label(server, 1, "brevity", 5)
    assert response.json()["progress"]["dimensions"]["brevity"] == {"done": 1, "total": 3}
    assert label(server, 1, "format", None).status_code == 200  # a skip
    line = read_labelling(labelling)[0]
    assert line["labels"] == {"format": None, "correctness": 1, "brevity": 5, "repetition": None}
    assert line["labellers"] == {"ann": {"correctness": 1, "brevity": 5, "format": None}}
    assert line["labelled_by"] == {"correctness": "ann", "brevity": "ann"}
    # bob disagrees: his answer is kept as his; `labels` keeps the first labeller's
    assert label(server, 1, "brevity", 3, labeller="bob").status_code == 200
    line = read_labelling(labelling)[0]
    assert line["labels"]["brevity"] == 5 and line["labellers"]["bob"] == {"brevity": 3}
    # back and changed: ann's new answer replaces her old one, in `labels` too
    assert label(server, 1, "brevity", 4).status_code == 200
    assert read_labelling(labelling)[0]["labels"]["brevity"] == 4
    assert [r["labels"]["brevity"] for r in read_labels(labelling, arithmetic)][:1] == [4]  # calibrate reads it


def test_a_ranking_is_saved_as_tiers_of_completion_indices(labelling, serve_page):
    server = serve_page(labelling)
    group = tasks(server)["items"][3]
    response = httpx.post(f"{server.url}/api/rank", headers=server.auth,
                          json={"labeller": "ann", "line": 4, "key": group["key"], "order": [[0], [1, 3], [2]]})
    assert response.status_code == 200 and response.json()["progress"]["groups"] == {"done": 1, "total": 1}
    line = read_labelling(labelling)[3]
    assert line["ranking"] == [[0], [1, 3], [2]] and line["ranked_by"] == "ann"
    assert line["rankings"] == {"ann": [[0], [1, 3], [2]]}
    again = tasks(server)["items"][3]
    assert again["order"] == [[0], [1, 3], [2]] and again["answered"] and again["shown"] == group["shown"]


def test_a_request_without_the_token_is_401(labelling, serve_page):
    server = serve_page(labelling)
    before = labelling.read_bytes()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": server.token}):
        response = httpx.post(f"{server.url}/api/label", headers=headers,
                              json={"labeller": "ann", "line": 1, "dimension": "brevity", "level": 5})
        assert response.status_code == 401 and "bearer token" in response.json()["detail"]
        assert httpx.get(f"{server.url}/api/tasks?labeller=ann", headers=headers).status_code == 401
    assert labelling.read_bytes() == before


def test_the_token_from_an_environment_variable(labelling, serve_page):
    server = serve_page(labelling, "api_key_env=LABEL_TOKEN", env={"LABEL_TOKEN": "s3cret-token"})
    assert server.token == "s3cret-token" and tasks(server)["file"] == labelling.name


@pytest.mark.parametrize(("body", "status", "detail"), [
    ({"line": 1, "dimension": "brevity", "level": 7}, 422,
     "level: 7 is not a whole level in [1, 5] (dimension brevity)"),
    ({"line": 1, "dimension": "correctness", "level": -1}, 422, "level: -1 is not a whole level in [0, 1]"),
    ({"line": 1, "dimension": "tone", "level": 1}, 422, "dimension: 'tone' is not one of the line's dimensions"),
    ({"line": 9, "dimension": "brevity", "level": 1}, 422, "line: no line 9; the file has 4"),
    ({"line": 4, "dimension": "brevity", "level": 1}, 422, "line: is a group to rank"),
    ({"line": 1, "dimension": "brevity", "level": "five"}, 422, "level: Input should be a valid integer"),
    ({"line": 1, "dimension": "brevity", "level": 2, "labeller": ""}, 422, "labeller: String should have at least"),
    ({"line": 1, "dimension": "brevity", "level": 2, "key": "0000"}, 409, "line changed since the page read it"),
])
def test_a_bad_answer_is_a_4xx_with_one_message_and_nothing_written(labelling, serve_page, body, status, detail):
    server = serve_page(labelling)
    before = labelling.read_bytes()
    response = httpx.post(f"{server.url}/api/label", headers=server.auth, json={"labeller": "ann", **body})
    assert response.status_code == status and detail in response.json()["detail"], response.text
    assert labelling.read_bytes() == before


def test_a_file_broken_under_the_page_is_409_and_stays_as_it_is(labelling, serve_page):
    server = serve_page(labelling)
    labelling.write_text("{not json\n", encoding="utf-8")
    response = label(server, 1, "brevity", 5)
    assert response.status_code == 409
    assert response.json()["detail"].startswith(f"the labelling file cannot be read now: {labelling}:1:")
    assert labelling.read_text(encoding="utf-8") == "{not json\n"
    assert httpx.get(f"{server.url}/api/tasks?labeller=ann", headers=server.auth).status_code == 409


def test_a_bad_order_is_422(labelling, serve_page):
    server = serve_page(labelling)
    for order, detail in [([[0], [1, 3]], "each completion index 0..3 exactly once"),
                          ([[0], [0, 1, 2, 3]], "exactly once"), ([], "a list of tiers")]:
        response = httpx.post(f"{server.url}/api/rank", headers=server.auth,
                              json={"labeller": "ann", "line": 4, "order": order})
        assert response.status_code == 422 and detail in response.json()["detail"]
    response = httpx.post(f"{server.url}/api/rank", headers=server.auth,
                          json={"labeller": "ann", "line": 1, "order": [[0]]})
    assert response.status_code == 422 and "not a group to rank" in response.json()["detail"]
    assert "rankings" not in read_labelling(labelling)[3]


def test_two_pages_on_one_file_lose_nothing(labelling, serve_page):
    # two servers (two team members started one each) and the terminal tool, all writing at once
    first, second = serve_page(labelling), serve_page(labelling)
    answers = [(server, name, line, dim, level)
               for server, name in ((first, "ann"), (second, "bob"))
               for line in (1, 2, 3) for dim, level in (("correctness", 1), ("brevity", 2), ("format", 0))]
    failures: list[str] = []

    def send(server, name, line, dim, level):
        response = label(server, line, dim, level, labeller=name)
        if response.status_code != 200:
            failures.append(response.text)

    threads = [threading.Thread(target=send, args=a) for a in answers]
    terminal = [threading.Thread(target=save_answer, args=(labelling, n, None,
                                                           lambda line: apply_label(line, "repetition", 5, None)))
                for n in (1, 2, 3)]
    for thread in threads + terminal:
        thread.start()
    for thread in threads + terminal:
        thread.join()
    assert not failures
    for line in read_labelling(labelling)[:3]:
        assert line["labellers"]["ann"] == line["labellers"]["bob"] == {"correctness": 1, "brevity": 2, "format": 0}
        assert line["labels"] == {"format": 0, "correctness": 1, "brevity": 2, "repetition": 5}
    # the second page sees the first's answers: bob's progress counts only his; the terminal's count for everyone
    assert tasks(second, "carol")["progress"]["dimensions"]["repetition"] == {"done": 3, "total": 3}
    assert tasks(second, "carol")["progress"]["dimensions"]["brevity"] == {"done": 0, "total": 3}
    assert not list(labelling.parent.glob(".*.tmp")), "no temp file left behind"


def test_the_terminal_answer_after_the_page_keeps_the_pages(labelling):
    # `rlkit label` read the file before a page answered: its save re-reads, the page's answer stays
    stale = read_labelling(labelling)[1]
    fresh = read_labelling(labelling)
    apply_label(fresh[1], "brevity", 2, "ann")
    write_lines(labelling, fresh)
    save_answer(labelling, 2, line_key(stale), lambda line: apply_label(line, "correctness", 0, None))
    line = read_labelling(labelling)[1]
    assert line["labels"]["brevity"] == 2 and line["labels"]["correctness"] == 0


def test_a_file_that_is_not_a_labelling_file_is_one_error_line(tmp_path, capsys, make_lines):
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"prompt": "2+2=", "completion": "4"}) + "\n", encoding="utf-8")
    assert main(["label", "serve", str(records)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rlkit: error: {records}:1: needs \"dimensions\"")

    wrong = tmp_path / "wrong.jsonl"
    lines = make_lines()
    lines[1]["labels"]["brevity"] = 9
    write_lines(wrong, lines)
    assert main(["label", "serve", str(wrong)]) == 2
    assert capsys.readouterr().err.strip() == \
        f'rlkit: error: {wrong}:2: "labels.brevity": 9 is not a whole level in [1, 5]'

    group = tmp_path / "group.jsonl"
    lines = make_lines()
    lines[3]["ranking"] = [[0, 1]]
    write_lines(group, lines)
    assert main(["label", "serve", str(group)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"rlkit: error: {group}:4: \"ranking\": must hold each")

    text = tmp_path / "notes.txt"
    text.write_text("not json\n", encoding="utf-8")
    assert main(["label", "serve", str(text)]) == 2
    assert capsys.readouterr().err.startswith(f"rlkit: error: {text}:1:")
    assert main(["label", "serve", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such labelling file" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["port=http"], "rlkit label serve port: must be a whole number >= 0, got 'http'"),
    (["port=70000"], "rlkit label serve port: must be at most 65535"),
    (["host=0.0.0.0"], "rlkit label serve host: unknown option"),
    (["api_key_env=RLKIT_NO_SUCH_TOKEN_VAR"], "the environment variable RLKIT_NO_SUCH_TOKEN_VAR is unset or empty"),
])
def test_bad_options_are_one_error_line(labelling, capsys, args, message):
    assert main(["label", "serve", str(labelling), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("rlkit: error: ")


def test_a_port_in_use_is_one_error_line(labelling, serve_page, capsys):
    server = serve_page(labelling)
    port = server.url.rsplit(":", 1)[1]
    assert main(["label", "serve", str(labelling), f"port={port}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"port {port} on 127.0.0.1 is in use" in err[0]


@pytest.mark.parametrize("command", [["compare", "serve", "no-such-comparison.jsonl"],
                                     ["compare", "no-such-run", "other-run"]], ids=["compare-serve", "compare"])
def test_compare_says_its_port_is_in_use_before_reading_anything(tmp_path, command, capsys, monkeypatch):
    import socket

    monkeypatch.chdir(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main([*command, f"port={port}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"port {port} on 127.0.0.1 is in use" in err[0], err
    assert not (tmp_path / "comparisons").exists()


def test_the_terminal_tool_points_to_calibrate_once_groups_are_ranked(labelling, capsys):
    from rich.console import Console

    from rlkit.commands.label import label_file

    lines = read_labelling(labelling)
    for number in (1, 2, 3):
        for dim in ("format", "correctness", "brevity", "repetition"):
            apply_label(lines[number - 1], dim, 1, None)
    apply_ranking(lines[3], [[0], [1, 2, 3]], "ann")
    write_lines(labelling, lines)
    assert label_file(labelling, Console(force_terminal=False, width=400), labeller="ann") == 0
    out = capsys.readouterr().out
    assert "all 3 lines labelled and all 1 groups ranked (as ann)" in out
    assert f"rlkit calibrate judge=ranking calibrate.labels={labelling}" in out
