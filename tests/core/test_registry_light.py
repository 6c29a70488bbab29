"""Building the registry (what `rlkit validate`, `plugins` and `--help` wait for) imports no heavy library: a plugin
module imports those where it uses them. group_dpo's module-level Lightning import alone cost 5 of 8 seconds."""

from __future__ import annotations

import json
import subprocess
import sys


def test_building_the_registry_imports_neither_lightning_nor_transformers():
    code = ("import json, sys; from rlkit.core.registry import load_registry; load_registry(); "
            "print(json.dumps(sorted(m for m in ('lightning', 'transformers', 'peft', 'wandb', 'datasets', 'fastapi') "
            "if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_command_word_and_help_import_no_torch():
    """`rlkit --help` and the dispatch of a command word load neither torch (1.7 s) nor the config layer: each
    command's module is imported when that command runs."""
    code = ("import json, sys; from rlkit.cli import main; main(['--help']); main(['no-such-command']); "
            "print(json.dumps(sorted(m for m in ('torch', 'rlkit.config', 'hydra', 'lightning') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert "unknown command 'no-such-command'" in out.stderr
