"""``rlkit data pairs`` writes what TRL's DPOTrainer and RewardTrainer read, and reads TRL's preference forms."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.data.pairs import PreferencePair, read_pairs
from rlkit.lm.models import build_tiny_policy

# a plain chat template for the tiny tokenizer, which has none; TRL renders conversational data with it
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def _prompt(i: int, chat: bool):
    text = f"{i}+1="
    return [{"role": "user", "content": text}] if chat else text


def _pairs_file(folder: Path, chat: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    listwise = [{"prompt": _prompt(i, chat), "responses": [{"text": str(i + 1), "rank": 1},
                                                           {"text": "no idea at all", "rank": 2}]} for i in range(4)]
    source, out = folder / "ranked.jsonl", folder / "pairs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in listwise), encoding="utf-8")
    assert main(["data", "pairs", f"in={source}", f"out={out}"]) == 0
    return out


def test_chat_pairs_are_written_in_trls_conversational_preference_format(tmp_path):
    first = json.loads(_pairs_file(tmp_path / "chat", chat=True).read_text().splitlines()[0])
    assert first == {"prompt": [{"role": "user", "content": "0+1="}],
                     "chosen": [{"role": "assistant", "content": "1"}],
                     "rejected": [{"role": "assistant", "content": "no idea at all"}]}
    text = json.loads(_pairs_file(tmp_path / "text", chat=False).read_text().splitlines()[0])
    assert text == {"prompt": "0+1=", "chosen": "1", "rejected": "no idea at all"}


def test_trls_preference_forms_are_read_back_as_text_pairs(tmp_path):
    user = [{"role": "user", "content": "1+1="}]
    lines = [
        {"prompt": user, "chosen": [{"role": "assistant", "content": "2"}],
         "rejected": [{"role": "assistant", "content": "3"}]},
        # implicit prompt: whole conversations sharing their opening turns
        {"chosen": [*user, {"role": "assistant", "content": "2"}], "rejected": [*user, {"role": "assistant",
                                                                                       "content": "4"}]},
        {"prompt": "1+1=", "chosen": "2", "rejected": "5"},
    ]
    path = tmp_path / "trl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert read_pairs(path) == [PreferencePair(user, "2", "3"), PreferencePair(user, "2", "4"),
                                PreferencePair("1+1=", "2", "5")]


@pytest.mark.parametrize("chat", [False, True], ids=["text", "conversational"])
def test_dpo_and_reward_trainers_train_on_the_written_pairs(tmp_path, chat):
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer, RewardConfig, RewardTrainer

    pairs = _pairs_file(tmp_path, chat)
    dataset = load_dataset("json", data_files=str(pairs), split="train")
    policy = build_tiny_policy()  # built from config, saved, loaded by path: nothing from a hub
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.chat_template = CHAT_TEMPLATE
    common = {"per_device_train_batch_size": 2, "max_steps": 1, "use_cpu": True, "report_to": "none",
              "save_strategy": "no", "logging_steps": 1, "disable_tqdm": True, "dataloader_num_workers": 0}
    dpo = DPOTrainer(model=str(policy), args=DPOConfig(output_dir=str(tmp_path / "dpo"), **common),
                     train_dataset=dataset, processing_class=tokenizer)
    row = dpo.train_dataset[0]
    chosen = tokenizer.decode(row["chosen_ids"], skip_special_tokens=True).strip()
    rejected = tokenizer.decode(row["rejected_ids"], skip_special_tokens=True).strip()
    assert (chosen, rejected) == ("1", "no idea at all")  # TRL tokenised the pair's own answers, nothing else
    assert math.isfinite(dpo.train().training_loss)
    reward = RewardTrainer(model=str(policy), args=RewardConfig(output_dir=str(tmp_path / "rm"), **common),
                           train_dataset=dataset, processing_class=tokenizer)
    assert math.isfinite(reward.train().training_loss)
    assert "accuracy" in reward.state.log_history[0]
