"""``rlkit <command> --help``: what one command does, its own arguments and, for the commands that compose the run's
config, the config groups with their options and the keys of the command's own block, generated from the registry
and the schemas so it is always true, with one example."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CommandHelp:
    summary: str
    usage: str
    example: str
    block: str | None = None  # the RunConfig block the command reads (score, serve, ...)
    config: bool = True       # composes conf/config.yaml: takes group options and overrides
    arguments: tuple[tuple[str, str], ...] = ()


HELP: dict[str, CommandHelp] = {
    "validate": CommandHelp("Compose the config and check every part (plugins, params, rubric, data, model path) "
                            "without building anything heavy.", "rlkit validate [overrides]",
                            "rlkit validate judge=ensemble aggregator=lexicographic"),
    "fit": CommandHelp("Train the policy with the configured judge, aggregator and estimator; -m sweeps.",
                       "rlkit fit [-m] [overrides]", "rlkit fit experiment=smollm2_arithmetic trainer.max_steps=10",
                       arguments=(("-m, --multirun", "a Hydra sweep: comma-separated values run one job each"),)),
    "sft": CommandHelp("Supervised fine-tuning on the records' demonstrations (rlkit fit objective=sft).",
                       "rlkit sft [overrides]", "rlkit sft data.path=demos.jsonl trainer.max_steps=50"),
    "score": CommandHelp("Score prompt/completion records with the configured judge, weights and aggregator; exits 3 "
                         "when a dimension was scored on none of them.", "rlkit score data.path=FILE [overrides]",
                         "rlkit score data.path=records.jsonl judge=llm score.output=scored.jsonl", block="score"),
    "calibrate": CommandHelp("Agreement of the configured judge with human labels, per dimension and step window "
                             "(quadratic-weighted Cohen's kappa, Spearman rho, bias).", "rlkit calibrate [overrides]",
                             "rlkit calibrate judge=llm calibrate.labels=labels.jsonl", block="calibrate"),
    "eval": CommandHelp("Golden-set evaluation of a checkpoint, per dimension and reference metric.",
                        "rlkit eval eval.checkpoint=DIR [overrides]", "rlkit eval eval.checkpoint=outputs/run/policy",
                        block="eval"),
    "serve": CommandHelp("Serve the configured judge, rubric and aggregator as an HTTP reward API.",
                         "rlkit serve [overrides]", "rlkit serve judge=rule serve.port=8000", block="serve"),
    "rubric audit": CommandHelp("Before training, can the run's rubric, judge and aggregator be gamed: probes, a "
                                "degradation ladder, re-grading, order, redundancy, human agreement; exits 1 when "
                                "the audit fails.", "rlkit rubric audit [--fail-under X] [overrides]",
                                "rlkit rubric audit audit.records=records.jsonl --fail-under 0.7", block="audit",
                                arguments=(("--fail-under X", "the trust score in [0, 1] below which it fails"),)),
    "config-reference": CommandHelp("Print the config reference as Markdown: every key of conf/config.yaml with its "
                                    "type, default and rule, then every registered plugin's params (the docs "
                                    "site's Config reference page, built from the same schemas).",
                                    "rlkit config-reference", "rlkit config-reference > config-reference.md",
                                    config=False),
    "plugins": CommandHelp("List every registered plugin by kind, with the distribution that provides it.",
                           "rlkit plugins [--kind KIND]", "rlkit plugins --kind judge", config=False,
                           arguments=(("--kind KIND", "only that kind (judge, aggregator, ...)"),)),
    "train-grm": CommandHelp("Train a generative reward model on preference pairs or rankings (conf/train_grm.yaml; "
                             "-m sweeps).", "rlkit train-grm [-m] grm.data.train=FILE [overrides]",
                             "rlkit train-grm grm.data.train=rankings.jsonl trainer.max_steps=50", config=False),
    "train-rm": CommandHelp("Train a Bradley-Terry reward model, a scalar head on a causal LM, on preference pairs "
                            "(conf/train_rm.yaml; -m sweeps); judge=reward_model scores with the folder it saves.",
                            "rlkit train-rm [-m] rm.data.train=FILE [overrides]",
                            "rlkit train-rm rm.data.train=train.pairs.jsonl rm.data.val=heldout.pairs.jsonl",
                            config=False),
    "label": CommandHelp("Label a labelling file in the terminal, one completion and dimension at a time, and rank "
                         "its groups (best first, `=` for a tie: 2 1=3 4), saved as you go; `rlkit calibrate` reads "
                         "the result. The judge's scores are never shown.",
                         "rlkit label <labelling file> [labeller=NAME] [seed=0]",
                         "rlkit label outputs/run/labelling/step_0000050.jsonl",
                         config=False, arguments=(("serve", "the same file on a page in a browser: rlkit label serve "
                                                            "--help"),)),
    "label serve": CommandHelp(
        "The labelling file as a web page on 127.0.0.1 for the people who label: one completion at a time with its "
        "prompt, reference and each dimension's anchors (a button and a key per level, skip, back, progress), and "
        "groups to rank side by side, shuffled (ties allowed). Each labeller gives a name, saved with each answer; "
        "every answer is saved at once in the file `rlkit label` writes (locked, re-read, replaced atomically), so "
        "pages and the terminal can share it. The judge's scores are never shown. Prints the URL to open (with its "
        "token); from another machine: ssh -N -L 8400:127.0.0.1:8400 <host>, then the same URL. Ctrl-C stops.",
        "rlkit label serve <labelling file> [port=8400] [api_key_env=NAME] [seed=0]",
        "rlkit label serve outputs/run/labelling/calibration_set.jsonl port=8400", config=False,
        arguments=(("port=N", "the port on 127.0.0.1 (default 8400; 0: any free one)"),
                   ("api_key_env=NAME", "the bearer token from this environment variable (as `rlkit serve`'s "
                                        "serve.api_key_env); default: a fresh random token each start"),
                   ("seed=N", "seeds the shuffled order of each group's completions (per labeller)"))),
    "compare": CommandHelp(
        "A blind side-by-side comparison for people: the held-out prompts with two runs' answers left and right, "
        "in a random order per prompt, never saying which run wrote which; labellers (each with a name) choose left, "
        "right or tie on a page on 127.0.0.1, saved at once. A side is a run's final answers (RUN), its answers "
        "before training (RUN@start) or an answers JSONL ({prompt, completion} lines); one run alone: its end "
        "against its start. Ctrl-C stops the page and prints the report: A's win rate over the untied prompts with "
        "a 95% Wilson interval, ties, per labeller and dimension, and the labellers' agreement.",
        "rlkit compare RUN_A [RUN_B] [out=FILE] [seed=0] [dimensions=NAME,...] [port=8400] [api_key_env=NAME] "
        "[serve=true]", "rlkit compare outputs/2026-12-03/10-00-00", config=False,
        arguments=(("out=FILE", "the comparison file (default <run A>/comparisons/<A>_vs_<B>.jsonl; its key beside "
                                "it as <stem>.key.json); the same command again goes on with it"),
                   ("seed=N", "seeds which answer of each prompt is on the left"),
                   ("dimensions=NAME,...", "rubric dimensions to prefer on too (optional on the page)"),
                   ("port=N", "the port on 127.0.0.1 (default 8400; 0: any free one)"),
                   ("api_key_env=NAME", "the bearer token from this environment variable; default: a fresh one"),
                   ("serve=false", "write the file and stop; serve it later: rlkit compare serve FILE"),
                   ("serve FILE", "the page of a comparison file already written"),
                   ("report FILE", "the report of a comparison file (printed, and <stem>.report.json)"))),
    "report": CommandHelp("(Re)build a run's report (plots and report.md); several runs: their golden-set results "
                          "side by side.", "rlkit report <run dir> [<run dir> ... [output=comparison.md]]",
                          "rlkit report outputs/2026-12-03/10-00-00", config=False),
    "doctor": CommandHelp("Triage a finished or interrupted run in the ranking note's order: the reward signal, the "
                          "judge's health, reference leaks, then the policy; each finding with its step, evidence "
                          "and what to try. Exits 0 when nothing was found, 1 when a finding is an error, 2 on bad "
                          "input.", "rlkit doctor <run dir>", "rlkit doctor outputs/2026-12-03/10-00-00",
                          config=False),
}
# Commands whose own usage text is their help (they parse their arguments themselves): `--help` goes to them.
SELF_HELPED = ("data", "export", "model", "new", "readiness", "rubric")


def _fields(schema: Any, prefix: str) -> list[str]:
    """``prefix.key (default): description`` for each field of a schema, nested blocks named by their prefix."""
    import pydantic

    lines = []
    for name, info in schema.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            lines.append(f"  {prefix}{name}.*: {(info.description or '').split('.')[0]}")
            continue
        default = info.get_default(call_default_factory=True)
        description = " ".join((info.description or "").split())
        lines.append(f"  {prefix}{name} (default {default!r}): {description}")
    return lines


def command_help(name: str) -> str | None:
    """The help text of command ``name`` (``rubric audit`` for a tool), or None for one without its own."""
    from rlkit.config.schemas import RunConfig

    entry = HELP.get(name)
    if entry is None:
        return None
    lines = [f"usage: {entry.usage}", "", entry.summary]
    if entry.arguments:
        lines += ["", "arguments:", *(f"  {flag}: {what}" for flag, what in entry.arguments)]
    if entry.config:
        lines += ["", "config groups (group=option):", *_groups()]
    if entry.block is not None:
        schema = RunConfig.model_fields[entry.block].annotation
        lines += ["", f"its own keys ({entry.block}.*):", *_fields(schema, f"{entry.block}.")]
    if name in ("fit", "sft", "validate"):
        lines += ["", "top-level keys (key=value) and blocks (block.key=value):", *_fields(RunConfig, "")]
    if entry.config:  # the reference page is generated on build, never in a clone: the command that prints it
        lines += ["", "Every key, with its default and constraint: rlkit config-reference. Overrides are Hydra's."]
    elif "[overrides]" in entry.usage:  # train-grm: its own conf/train_grm.yaml, not the run's keys
        lines += ["", "Overrides are Hydra's."]
    lines += ["", f"example: {entry.example}"]
    return "\n".join(lines)


def _groups() -> list[str]:
    from rlkit.commands.common import run_registry
    from rlkit.config import group_options
    from rlkit.core.registry import KINDS

    registry = run_registry()
    plugin_groups = [kind.group for kind in KINDS if kind.selected_by is None]
    out = []
    for group in [*plugin_groups, "model", "data", "rubric", "trainer", "logger", "experiment"]:
        options = group_options(registry, group)
        shown = ", ".join(options) if options else "(none shipped)"
        out.append(f"  {group}: {shown}" + (" (a list: monitors=[a,b])" if group == "monitors" else ""))
    return out


__all__ = ["HELP", "CommandHelp", "command_help"]
