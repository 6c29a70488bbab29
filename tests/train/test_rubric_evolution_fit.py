"""An evolving-rubric run of ``rlkit fit`` (judge=llm, rubric=per_record, the tiny policy) against a loopback server
that grades criteria and writes new ones as canned JSON (one prompt's answers always malformed): versions, diffs and
the buffer land in the run directory, and a run killed and resumed from its checkpoint continues with the same buffer
as a run that was never interrupted (marked slow, still in CI)."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from rlkit.cli import main
from rlkit.core.rubric import load_rubric
from rlkit.testing.canned_chat import CannedChatServer, score_each_dimension

pytestmark = pytest.mark.slow

BASE = [("States the sum", "essential"), ("Gives the answer as digits", "essential"),
        ("Shows the addition", "important"), ("Names both numbers", "important"), ("Is one line", "optional"),
        ("Uses no jargon", "optional"),
        ("States a wrong sum", "pitfall")]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def _data(root: Path) -> Path:
    lines = []
    for i in range(1, 9):
        dims = [{"name": f"c{k}", "description": text, "type": "binary", "category": category}
                for k, (text, category) in enumerate(BASE)]
        path = root / f"q{i}.yaml"
        path.write_text(yaml.safe_dump({"name": f"q{i}", "version": "1", "dimensions": dims}), encoding="utf-8")
        lines.append(json.dumps({"id": f"q{i}", "prompt": f"{i}+{i}=", "rubric": str(path)}))
    data = root / "data.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data


def _bit(*parts: str) -> int:
    return hashlib.sha256("|".join(parts).encode()).digest()[0] % 2


def verdict(name: str, response: str) -> int:
    """Criteria answers that vary with the response (rewards differ within a group), except the first evolved
    criterion of every prompt, which every response meets: it saturates and is retired."""
    return 1 if name == "evolved_1" else _bit(name, response)


def criteria(messages: list[dict]) -> str:
    """New criteria named after the prompt and the better response (the same request, the same answer, so a resumed
    run is asked what an uninterrupted one is); prompt 3's answers cannot be read."""
    text = messages[0]["content"]
    prompt = text.split("PROMPT:\n", 1)[1].split("\n", 1)[0]
    if prompt.startswith("3+"):
        return "Sorry, no criteria today."
    better = re.split(r"(?:BETTER RESPONSE|RESPONSE A):\n", text, maxsplit=1)[1].split("\n", 1)[0]
    tag = hashlib.sha256((prompt + better).encode()).hexdigest()[:6]
    return json.dumps({"criteria": [{"criterion": f"Mentions {tag}", "category": "important"},
                                    {"criterion": f"Writes {tag[::-1]} instead of the sum", "category": "pitfall"}]})


def _args(server: CannedChatServer, data: Path) -> list[str]:
    return ["model=tiny_random", "logger=csv", "rubric=per_record", "judge=llm", "judge.params.backend.name=openai",
            f"++judge.params.backend.params={{base_url: '{server.url}', model: canned, max_retries: 0}}",
            f"data.path={data}", "batch_size=2", "num_generations=4", "checkpoint_every=2", "rubric.evolve.every=1",
            "torch_threads=1"]


def _rubric_metrics(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return [row for row in csv.DictReader(fh) if row.get("rubric/evolve_versions")]


def test_an_evolving_run_leaves_versions_diffs_and_its_buffer_in_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    with CannedChatServer(score_each_dimension(verdict, criteria)) as server:
        assert main(["fit", *_args(server, _data(tmp_path)), "trainer.max_steps=6", f"hydra.run.dir={run_dir}"]) == 0
        graded = [m[0]["content"] for m in server.requests if "\nRESPONSE:\n" in m[0]["content"]]
    rubrics = run_dir / "rubrics"
    buffer = json.loads((rubrics / "buffer.json").read_text())
    versions = [json.loads(line) for line in (rubrics / "versions.jsonl").read_text().splitlines()]
    assert versions and all(v["version"].startswith("1+evolve.") for v in versions)
    for v in versions:  # every version is a valid rubric file whose hash is the one logged, beside its diff
        folder = rubrics / v["rubric_id"]
        rubric = load_rubric(folder / f"{v['version']}.yaml")
        assert rubric.content_hash == v["hash"] and rubric.changelog[-1].hash == v["hash"]
        diff = json.loads((folder / f"{v['previous_version']}..{v['version']}.diff.json").read_text())
        assert diff["added"] == [c["name"] for c in v["added"]] and diff["new_hash"] == v["hash"]
        assert (folder / f"{v['previous_version']}..{v['version']}.diff.txt").is_file()
        assert (folder / "1.yaml").is_file()  # the record's own rubric starts the chain
    assert "q3" not in buffer["prompts"]  # its answers were malformed: skipped, counted, logged
    malformed = [json.loads(line) for line in (rubrics / "malformed.jsonl").read_text().splitlines()]
    assert malformed and {row["rubric_id"] for row in malformed} == {"q3"}
    logged = _rubric_metrics(run_dir)
    assert len(logged) == 6 and float(logged[-1]["rubric/evolve_malformed_total"]) == len(malformed)
    # a prompt met again after its first round had the saturated criterion retired, in a version of its own
    retired = [c for entry in buffer["prompts"].values() for c in entry["retired"]]
    assert "evolved_1" in {c["name"] for c in retired}  # every response meets it (others may saturate by chance)
    assert all(c["retired_because"] == "saturated" and c["retired_step"] > c["added_step"] for c in retired)
    # the evolved criteria were graded during training; the held-out prompt kept its own rubric throughout
    assert any("* evolved_2 (0 or 1)" in text for text in graded)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["callbacks"]["RubricEvolution"]["buffer"] == buffer
    assert ckpt["rlkit"]["rubric"]["name"] == "per_record"  # the frame (what golden and held-out scores follow)


def test_a_killed_run_resumes_with_the_same_buffer(tmp_path):
    from rlkit.testing.runs import fit_killed_at_first_checkpoint

    data = _data(tmp_path)
    with CannedChatServer(score_each_dimension(verdict, criteria)) as server:
        args = _args(server, data)
        ckpt = fit_killed_at_first_checkpoint(args, tmp_path / "killed")
        saved = torch.load(ckpt, weights_only=False)
        k, held = saved["global_step"], saved["callbacks"]["RubricEvolution"]["buffer"]
        assert k % 2 == 0 and k > 0 and held["prompts"], "the checkpoint holds the buffer of the rounds before it"

        resumed, straight = tmp_path / "resumed", tmp_path / "straight"
        assert main(["fit", *args, f"trainer.max_steps={k + 2}", f"ckpt_path={ckpt}",
                     f"hydra.run.dir={resumed}"]) == 0
        assert main(["fit", *args, f"trainer.max_steps={k + 2}", f"hydra.run.dir={straight}"]) == 0

    def buffer(run_dir: Path) -> dict:
        return json.loads((run_dir / "rubrics" / "buffer.json").read_text())

    def versions(run_dir: Path) -> list[dict]:
        return [json.loads(line) for line in (run_dir / "rubrics" / "versions.jsonl").read_text().splitlines()]

    assert buffer(resumed) == buffer(straight)
    # the checkpoint held what the uninterrupted run had written before step k, and the resumed run wrote exactly
    # what it wrote from step k on
    before = {row["rubric_id"]: row["version"] for row in versions(straight) if row["step"] < k}
    assert {rid: entry["versions"][-1]["version"] for rid, entry in held["prompts"].items()} == before
    assert versions(resumed) == [row for row in versions(straight) if row["step"] >= k]
