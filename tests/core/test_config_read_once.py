"""The config is read once: `rlkit.config` validates the composed config and hands each layer its own typed block
(`CheckedConfig.run`, `.model`, `.eval_block`, `.logger_settings`, `.judge_config`, ...); below the commands no
module reaches back into the raw `validated.cfg`."""

import re
from pathlib import Path

RLKIT = Path(__file__).resolve().parents[2] / "rlkit"
# the layers below the commands, but config itself (which owns the raw config)
LAYERS = ("train", "serve", "integrations", "evaluation", "grm", "runs", "judging", "reward", "lm", "data", "text",
          "core")
RAW_READ = re.compile(r"validated\.cfg\b|\w\.cfg\b")


def test_no_layer_below_the_commands_reads_the_raw_config_of_a_validated_run():
    found = [f"{path.relative_to(RLKIT.parent)}:{number}: {line.strip()}"
             for layer in LAYERS for path in sorted((RLKIT / layer).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if RAW_READ.search(line)]
    assert not found, "raw config reads (read the block CheckedConfig hands over instead):\n" + "\n".join(found)


def test_the_guard_sees_a_raw_read():
    assert RAW_READ.search("normalization = validated.cfg.get('score_normalization')")
    assert RAW_READ.search("options = eval_options(self.cfg)")
    assert not RAW_READ.search("def make_logger(settings, run_dir):")
