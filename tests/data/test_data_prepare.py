"""rlkit data prepare: PII scrubbing, near-duplicate removal (shared with rlkit data pairs), difficulty mix."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch

import rlkit.text.dedup
from rlkit.cli import main
from rlkit.data.pairs import ListwiseRecord, RankedResponse, listwise_to_pairs
from rlkit.data.prepare import allocate, largest_size, parse_mix, sample_mix
from rlkit.text.dedup import Duplicate, near_duplicates, pair_similarities
from rlkit.text.pii import scrub_text, scrub_value
from rlkit.text.similarity import char_ngram_jaccard


def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.mark.parametrize(("text", "kind", "scrubbed"), [
    ("Mail me at john.doe+rl@example.co.uk please.", "email", "Mail me at [EMAIL] please."),
    ("Call +1 (555) 123-4567 today", "phone", "Call [PHONE] today"),
    ("my number is 555-123-4567.", "phone", "my number is [PHONE]."),
    ("ring +44 20 7946 0958", "phone", "ring [PHONE]"),
    ("手机 13812345678", "phone", "手机 [PHONE]"),
    ("appelez le 06 12 34 56 78", "phone", "appelez le [PHONE]"),
    ("phone: 555-1234", "phone", "phone: [PHONE]"),
    ("My order #A123-4567 never came", "order", "My order #[ORDER] never came"),
    ("order number is 5512-99", "order", "order number is [ORDER]"),
    ("订单号：20231105887766 未发货", "order", "订单号：[ORDER] 未发货"),
    ("SSN 123-45-6789", "id", "SSN [ID]"),
    ("passport no. X1234567", "id", "passport no. [ID]"),
    ("customer number: 889123", "id", "customer number: [ID]"),
    ("身份证号 11010519491231002X", "id", "身份证号 [ID]"),
    ("card 4111 1111 1111 1111 expires", "id", "card [ID] expires"),
    ("see https://example.com/reset?token=abc123&user=5 now.", "url", "see [URL] now."),
    ("https://s3.amazonaws.com/b/k?X-Amz-Signature=deadbeef", "url", "[URL]"),
    ("log in at https://user:hunter2@example.com/x", "url", "log in at [URL]"),
])
def test_pii_is_replaced_by_a_typed_placeholder(text, kind, scrubbed):
    out, counts = scrub_text(text)
    assert out == scrubbed and counts == Counter({kind: 1})


@pytest.mark.parametrize("text", [
    "3+4=7", "What is 123456789 * 987654321?", "12 + 345 = 357", "Compute 2^10 = 1024", "1,234,567 + 89 = ?",
    "x = 3.14159265358979", "Solve 3x - 4 = 11", "On 2024-01-15 at 10:30", "Compute 800-555-1234 = ?",
    "The population is 14000000000 people", "sort in ascending order 12345 first", "take into account 12345 apples",
    "https://example.com/page?q=cats&page=2", "12345678901234567890 + 1", "What is 13579246801 + 2?",
    "The sum 100000 + 200000 = 300000", "f(x) = 0612345678 * x", "Let n = 123456789012.", "ID 42",
    "card 4111 1111 1111 1112", "answer: 1 2 3 4 5 6 7 8 9 10",
])
def test_pii_leaves_numbers_in_math_and_plain_text_alone(text):
    assert scrub_text(text) == (text, Counter())


def test_scrub_value_reaches_nested_strings_and_counts_per_kind():
    record = {"prompt": [{"role": "user", "content": "I am a@b.io, order #ZX-99812"}], "n": 3,
              "email": "c@d.org", "tags": ["call 555-123-4567", None]}
    scrubbed, counts = scrub_value(record)
    assert scrubbed == {"prompt": [{"role": "user", "content": "I am [EMAIL], order #[ORDER]"}], "n": 3,
                        "email": "[EMAIL]", "tags": ["call [PHONE]", None]}
    assert counts == Counter(email=2, order=1, phone=1)


def _greedy_by_hand(texts, threshold):
    kept, dropped = [], []
    for i, text in enumerate(texts):
        sims = [(char_ngram_jaccard(text, texts[k]), k) for k in kept]
        if any(s >= threshold for s, _ in sims):
            dropped.append(i)
        else:
            kept.append(i)
    return dropped


def test_ngram_near_duplicates_are_the_greedy_definition_across_blocks(monkeypatch):
    rng = random.Random(1)
    base = ["what is the sum of 3 and 4", "prove that sqrt 2 is irrational", "write a poem about the sea", "hi"]
    texts = [rng.choice(base).replace(" ", "  ", rng.randint(0, 1)) + rng.choice(["", "?", " now", " please x"])
             + (str(i) if rng.random() < 0.3 else "") for i in range(60)]
    # small blocks and kept-chunks so that the cross-block and in-block paths both run many times
    monkeypatch.setattr(rlkit.text.dedup, "BLOCK_ROWS", 8)
    monkeypatch.setattr(rlkit.text.dedup, "KEPT_CHUNK", 5)
    for threshold in (0.6, 0.9, 1.0):
        duplicates = near_duplicates(texts, "ngram", threshold)
        assert [d.index for d in duplicates] == _greedy_by_hand(texts, threshold)
        for d in duplicates:
            assert d.kept_index < d.index and d.similarity >= threshold
            assert d.similarity == pytest.approx(char_ngram_jaccard(texts[d.index], texts[d.kept_index]))


def test_near_duplicates_edge_cases():
    assert near_duplicates(["a b", "A  b", "c"], "ngram", 0.9) == [Duplicate(1, 0, 1.0)]
    assert near_duplicates(["same", "same"], "none", 0.5) == [] and near_duplicates(["x"], "ngram") == []
    with pytest.raises(rlkit.core.errors.ConfigError, match="unknown similarity 'fuzzy'; available: ngram, embedding"):
        near_duplicates(["a", "b"], "fuzzy")  # type: ignore[arg-type]


class _LengthSimilarity:
    """A stand-in similarity: texts of equal length are the same."""

    def features(self, texts):
        return torch.tensor([float(len(t)) for t in texts])

    def block(self, features, rows, cols):
        return (features[rows, None] == features[None, cols]).double()

    def pairs(self, a, b):
        return [float(len(x) == len(y)) for x, y in zip(a, b, strict=True)]


def test_a_similarity_plugs_into_dedup_and_into_data_pairs(monkeypatch):
    assert [d.index for d in near_duplicates(["ab", "cd", "xyz", "uvw", "q"], _LengthSimilarity(), 0.5)] == [1, 3]
    assert pair_similarities(["ab"], ["cd"], _LengthSimilarity()) == [1.0]
    # rlkit data pairs' near-duplicate check goes through the same registry
    monkeypatch.setitem(rlkit.text.dedup.SIMILARITIES, "embedding", _LengthSimilarity)
    record = ListwiseRecord("p", (RankedResponse("four", 1), RankedResponse("five", 2), RankedResponse("sixty", 3)))
    assert listwise_to_pairs([record]).dropped["near_duplicate"] == 0
    result = listwise_to_pairs([record], near_duplicate_method="embedding")
    assert result.dropped["near_duplicate"] == 1 and len(result.pairs) == 2


def test_mix_allocation_and_largest_size():
    shares = parse_mix("easy:3, medium:5,hard:2")
    assert shares == {"easy": 3.0, "medium": 5.0, "hard": 2.0}
    assert allocate(shares, 10) == {"easy": 3, "medium": 5, "hard": 2}
    assert allocate(shares, 7) == {"easy": 2, "medium": 4, "hard": 1}  # largest remainders, sums to 7
    assert largest_size(shares, {"easy": 100, "medium": 10, "hard": 100}) == 20
    # 11 -> 3, 6, 2 (medium takes the largest remainder); 12 would need 4 easy
    assert largest_size(shares, {"easy": 3, "medium": 100, "hard": 100}) == 11
    for bad in ("easy", "easy:0", "easy:x", "easy:1,easy:2", ":3"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_sample_mix_hits_the_shares_seeded_and_reports_what_it_left():
    levels = ["easy"] * 40 + ["medium"] * 40 + ["hard"] * 40 + [None] * 3 + ["expert"] * 2
    mix = parse_mix("easy:3,medium:5,hard:2")
    result = sample_mix(levels, mix, None, seed=0)
    assert [levels[i] for i in result.keep].count("medium") == 40 and len(result.keep) == 80
    assert result.keep == sorted(result.keep) and result.keep == sample_mix(levels, mix, None, seed=0).keep
    assert result.keep != sample_mix(levels, mix, None, seed=1).keep
    assert {k: v["realised_share"] for k, v in result.report["levels"].items()} == \
        {"easy": 0.3, "medium": 0.5, "hard": 0.2}
    assert result.report["missing_field"] == 3 and result.report["other_levels"] == {"expert": 2}
    assert result.removed == Counter(missing_mix_field=3, level_not_in_mix=2, not_sampled=40)


def test_a_short_level_gives_all_it_has_and_says_so():
    levels = ["easy"] * 50 + ["medium"] * 50 + ["hard"] * 5
    result = sample_mix(levels, parse_mix("easy:3,medium:5,hard:2"), 50, seed=0)
    hard = result.report["levels"]["hard"]
    assert (hard["target"], hard["sampled"]) == (10, 5) and len(result.keep) == 45
    assert hard["realised_share"] == round(5 / 45, 6)
    assert "'hard': 10 wanted, 5 available; took all of them" in result.report["warnings"][0]
    empty = sample_mix(["easy"] * 6 + ["medium"] * 10, parse_mix("easy:3,medium:5,hard:2"), None, seed=0)
    assert len(empty.keep) == 16 and "'hard' has no records" in empty.report["warnings"][0]
    uniform = sample_mix(["a"] * 10, None, 4, seed=0)
    assert len(uniform.keep) == 4 and uniform.removed["not_sampled"] == 6


def test_cli_end_to_end(capsys, tmp_path):
    rows = [{"id": i, "prompt": f"Problem {i}: what is {i}+{7 * i}? Mail me at user{i}@mail.com",
             "difficulty": ["easy", "medium", "hard"][i % 3]} for i in range(30)]
    source = _write(tmp_path / "in.jsonl", *rows[:5], "{oops",
                    {"id": 99, "prompt": "Problem 1:  what is 1+7? mail me at someone@mail.com", "difficulty": "easy"},
                    {"prompt": "", "difficulty": "easy"}, *rows[5:],
                    {"prompt": [{"role": "user", "content": "order #A123-4567 lost"}], "difficulty": "expert"})
    out = tmp_path / "out" / "prepared.jsonl"
    code = main(["data", "prepare", f"in={source}", f"out={out}", "dedup=ngram", "dedup_threshold=0.95",
                 "mix=easy:3,medium:5,hard:2", "seed=3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"{source}:6: invalid JSON" in captured.err and f'{source}:8: "prompt" is empty' in captured.err
    assert "records written" in captured.out and "duplicate: line 7 ~ line 2" in captured.out
    written = [json.loads(line) for line in out.read_text().splitlines()]
    report = json.loads((tmp_path / "out" / "prepared.report.json").read_text())
    assert report["records_read"] == 34 and report["records_written"] == len(written) == 20
    assert report["records_read"] - sum(report["removed"].values()) == report["records_written"]
    assert report["removed"] == {"rejected": 2, "duplicate": 1, "missing_mix_field": 0, "level_not_in_mix": 1,
                                 "not_sampled": 10}
    assert report["pii"]["replacements"] == {"url": 0, "email": 31, "order": 1, "id": 0, "phone": 0}
    assert report["dedup"]["examples"] == [{"line": 7, "kept_line": 2, "similarity": 1.0,
                                            "text": "Problem 1:  what is 1+7? mail me at [EMAIL]",
                                            "kept_text": "Problem 1: what is 1+7? Mail me at [EMAIL]"}]
    assert Counter(r["difficulty"] for r in written) == {"easy": 6, "medium": 10, "hard": 4}
    assert all(set(r) == {"id", "prompt", "difficulty"} and "[EMAIL]" in r["prompt"] for r in written)
    assert [r["id"] for r in written] == sorted(r["id"] for r in written)  # input order kept
    rejects = [json.loads(line) for line in (tmp_path / "out" / "prepared.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["raw"][:6]) for r in rejects] == [(6, "{oops"), (8, '{"prom')]
    assert sorted(p.name for p in out.parent.iterdir()) == ["prepared.jsonl", "prepared.rejects.jsonl",
                                                            "prepared.report.json"]  # no temp files


def test_cli_every_line_bad_fails_but_keeps_the_rejects(capsys, tmp_path):
    source = _write(tmp_path / "bad.jsonl", "nope", '{"text": "no prompt"}')
    out = tmp_path / "prepared.jsonl"
    code = main(["data", "prepare", f"in={source}", f"out={out}", "dedup=none"])
    err = capsys.readouterr().err
    assert code == 2 and "every line (2) is bad" in err and f'{source}:2: missing "prompt"' in err
    assert not out.exists() and len((tmp_path / "prepared.rejects.jsonl").read_text().splitlines()) == 2


def test_cli_text_field_and_no_pii(capsys, tmp_path):
    source = _write(tmp_path / "in.jsonl", {"question": "write to a@b.io"}, {"question": "WRITE to a@b.io"})
    out = tmp_path / "prepared.jsonl"
    assert main(["data", "prepare", f"in={source}", f"out={out}", "text_field=question", "pii=false",
                 "dedup=ngram"]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == [{"question": "write to a@b.io"}]


@pytest.mark.parametrize(("argv", "expected"), [
    (["data", "prepare", "in=x.jsonl"], "out: Field required"),
    (["data", "prepare", "in=x.jsonl", "out=y.jsonl", "dedup=fuzzy"], "dedup:"),
    (["data", "prepare", "in=x.jsonl", "out=y.jsonl", "dedup_threshold=0"], "dedup_threshold:"),
    (["data", "prepare", "in=x.jsonl", "out=y.jsonl", "mix=easy:3,easy:2"], "level 'easy' is given twice"),
    (["data", "prepare", "in=x.jsonl", "out=y.jsonl", "mix=easy"], "expected level:weight pairs"),
    (["data", "prepare", "in=x.jsonl", "out=y.jsonl", "size=0"], "size:"),
    (["data", "prepare", "in=x.jsonl", "out=y.jsonl", "pii=maybe"], "pii:"),
    (["data", "prepare", "in=x.jsonl", "out=y.jsonl", "colour=red"], "colour: unknown argument"),
    (["data", "prepare", "in=/does/not/exist.jsonl", "out=y.jsonl"], "no such data file or datasets directory"),
])
def test_cli_usage_errors(capsys, argv, expected):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and expected in err
    if ":" in expected or "Field" in expected:
        assert "usage: rlkit data prepare in=" in err


def test_cli_a_missing_embedding_model_fails_before_writing(capsys, tmp_path):
    source = _write(tmp_path / "in.jsonl", {"prompt": "a"}, {"prompt": "b"})
    out = tmp_path / "prepared.jsonl"
    code = main(["data", "prepare", f"in={source}", f"out={out}", f"embedding_model={tmp_path / 'nope'}"])
    assert code == 2 and "not a saved model folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_cli_reads_a_datasets_directory(capsys, tmp_path):
    datasets = pytest.importorskip("datasets", reason="reading a datasets directory needs the datasets package")
    rows = [{"prompt": f"task {i}: call 555-123-45{i:02d}", "difficulty": "easy" if i < 6 else "hard"}
            for i in range(10)]
    rows[3]["prompt"] = ""
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "prepared.jsonl"
    code = main(["data", "prepare", f"in={tmp_path / 'ds'}", f"out={out}", "dedup=ngram", "mix=easy:1,hard:1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f'{tmp_path / "ds"}[row 3]: "prompt" is empty' in captured.err
    written = [json.loads(line) for line in out.read_text().splitlines()]
    # 5 easy and 4 hard rows: 9 at 1:1 rounds to 5 + 4 (largest remainder to the level listed first)
    assert len(written) == 9 and all(r["prompt"].endswith("call [PHONE]") for r in written)
    rejects = (tmp_path / "prepared.rejects.jsonl").read_text()
    assert json.loads(rejects)["row"] == 3
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:2]),
                          "test": datasets.Dataset.from_list(rows[2:4])}).save_to_disk(str(tmp_path / "dd"))
    assert main(["data", "prepare", f"in={tmp_path / 'dd'}", f"out={out}", "dedup=none"]) == 2
    assert "splits train, test; choose one with split=NAME" in capsys.readouterr().err
    assert main(["data", "prepare", f"in={tmp_path / 'dd'}", f"out={out}", "dedup=none", "split=train"]) == 0
    assert len(out.read_text().splitlines()) == 2
    assert main(["data", "prepare", f"in={tmp_path}", f"out={out}"]) == 2
    assert "not a dataset saved with save_to_disk" in capsys.readouterr().err


def test_embedding_dedup_and_pairs(capsys, tmp_path):
    from rlkit.text.embeddings import embedding_available

    reason = embedding_available()
    if reason:
        pytest.skip(f"the embedding model is not available: {reason}")
    source = _write(tmp_path / "in.jsonl", {"prompt": "What is the capital of France?"},
                    {"prompt": "Write a short poem about the sea."},
                    {"prompt": "What's the capital city of France?"}, {"prompt": "Add three and four."})
    out = tmp_path / "prepared.jsonl"
    assert main(["data", "prepare", f"in={source}", f"out={out}", "dedup_threshold=0.85"]) == 0  # embedding default
    report = json.loads((tmp_path / "prepared.report.json").read_text())
    assert report["dedup"]["method"] == "embedding" and report["dedup"]["removed"] == 1
    example = report["dedup"]["examples"][0]
    assert (example["line"], example["kept_line"]) == (3, 1) and example["similarity"] >= 0.85
    assert len(out.read_text().splitlines()) == 3
    # rlkit data pairs with the same embedder: a paraphrased answer pair is a near-duplicate, n-grams miss it
    record = ListwiseRecord("capital?", (RankedResponse("Paris is the capital.", 1),
                                         RankedResponse("The capital is Paris.", 2)))
    assert listwise_to_pairs([record], near_duplicate=0.9).dropped["near_duplicate"] == 0
    assert listwise_to_pairs([record], near_duplicate=0.9,
                             near_duplicate_method="embedding").dropped["near_duplicate"] == 1
