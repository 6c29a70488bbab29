"""People's labels as a judge's few-shot examples (the ``llm`` judge's ``examples``): each rubric dimension's
labelled completions of a labelling file.

The file is a labelling file as ``rlkit label``, the labelling page and ``rlkit calibrate sample`` write them
(:mod:`rlkit.evaluation.labelling`), or a file of ``rlkit calibrate``'s labels format (``labels`` without
``dimensions``); a folder is every ``*.jsonl`` in it, as ``rlkit calibrate`` reads one. Group lines (rankings) are
left out. Where several people labelled a line, its level is their consensus by ``rlkit data from-labels``' rule
(:func:`rlkit.evaluation.label_training_data.consensus_level`: the majority level, none on a tie or below the
default agreement), so a judge is taught what ``from-labels`` would train on.

Every line's dimensions must be the rubric's (an example of a dimension the rubric lacks, or from a rubric that had
fewer, would teach the judge another scale): a mismatch is a ``DataError`` naming the file and line, as is a file
with no labelled completion.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError
from rlkit.core.rubric import Rubric
from rlkit.data.records import json_lines, prompt_text
from rlkit.evaluation.calibration import is_ranking_task, labels_files, read_labels
from rlkit.evaluation.label_training_data import consensus_level


@dataclass(frozen=True)
class LabelledExample:
    """One labelled completion as an example of one dimension: the prompt as text, the completion, the level."""

    prompt: str
    completion: str
    level: float


def _declared(record: dict[str, Any]) -> set[str]:
    """The dimensions a line was written for: its ``dimensions`` (a labelling file), else the labels' names."""
    dims = record.get("dimensions")
    if isinstance(dims, list):
        return {d.get("name") for d in dims if isinstance(d, dict)}
    return set(record.get("labels") or {}) | {name for given in (record.get("labellers") or {}).values()
                                              if isinstance(given, dict) for name in given}


def read_label_examples(path: str | Path, rubric: Rubric) -> dict[str, list[LabelledExample]]:
    """Each of the rubric's dimensions (by name, in rubric order) -> its labelled completions, in file order."""
    path = Path(path)
    wanted = [d.name for d in rubric.dimensions]
    pool: dict[str, list[LabelledExample]] = {name: [] for name in wanted}
    for file in labels_files(path):
        records = read_labels(file, rubric)  # each level checked against the rubric; group lines left out
        numbers = [n for n, line in json_lines(file) if not is_ranking_task(line)]
        for number, record in zip(numbers, records, strict=True):
            declared = _declared(record)
            if declared and declared != set(wanted):
                extra, missing = sorted(declared - set(wanted)), [n for n in wanted if n not in declared]
                said = "; ".join(part for part in (f"not in the rubric: {', '.join(extra)}" if extra else "",
                                                   f"missing: {', '.join(missing)}" if missing else "") if part)
                raise DataError(f"the line's dimensions do not match rubric {rubric.name} v{rubric.version} "
                                f"({', '.join(wanted)}): {said}", f"{file}:{number}")
            for name in wanted:
                level = consensus_level(record, name)
                if level is not None:
                    pool[name].append(LabelledExample(prompt_text(record["prompt"]), record["completion"], level))
    if not any(pool.values()):
        raise DataError("no labelled completion in the file: label some first (`rlkit label <file>`)", str(path))
    return pool

