"""`rlkit validate` warns when a pretrained model is trained at a rate that suits a model built from scratch."""

from __future__ import annotations

import pytest

from rlkit.cli import main
from rlkit.lm.models import build_tiny_policy


@pytest.mark.parametrize("overrides, warned", [
    (["optim.lr=2e-4"], True),                       # the embedded policy's rate on a model of the user's
    (["optim.lr=1e-5"], False),
    (["optim.lr=2e-4", "model.lora.r=8"], False),    # LoRA takes about ten times a full fine-tune's rate
    (["optim.lr=2e-3", "model.lora.r=8"], True),
])
def test_a_pretrained_model_at_a_from_scratch_rate_is_warned(tmp_path, capsys, overrides, warned):
    folder = build_tiny_policy(cache_dir=tmp_path)
    assert main(["validate", f"model.name_or_path={folder}", *overrides]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "far above what suits a pretrained model" in line]
    assert len(said) == int(warned), said
    assert all(line.startswith("rlkit: warning: ") for line in said), "one rlkit line, not Python's warning"


def test_the_embedded_policy_is_not_warned(capsys):
    assert main(["validate", "optim.lr=2e-3"]) == 0
    assert "far above" not in capsys.readouterr().err
