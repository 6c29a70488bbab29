"""``rlkit calibrate sample <run dir> n=300``: a stratified set of a run's samples, written for labelling."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlkit.commands.common import run_registry
from rlkit.core.errors import ConfigError

USAGE = ("usage: rlkit calibrate sample <run dir> [n=300] [seed=0] [step_bins=4] [reward_bins=4] "
         "[output=<file>] [rubric=<rubric.yaml>]; groups to rank instead: rlkit calibrate sample <run dir> groups=20 "
         "[seed=0] [step_bins=4] [output=<file>] [rubric=<rubric.yaml>]")


def cmd_calibrate_sample(args: Sequence[str]) -> int:
    from rlkit.evaluation.calibration_sample import build_calibration_set, sample_options

    positional = [a for a in args if "=" not in a]
    if len(positional) != 1:
        raise ConfigError(USAGE, "rlkit calibrate sample")
    given = dict(a.split("=", 1) for a in args if "=" in a)
    if "groups" in given:
        from rlkit.evaluation.ranking_sample import build_ranking_set, group_options

        path, lines = build_ranking_set(Path(positional[0]), group_options(given))
        low, high = min(len(line["completions"]) for line in lines), max(len(line["completions"]) for line in lines)
        print(f"wrote {len(lines)} groups ({low if low == high else f'{low}-{high}'} completions each) to {path}; "
              f"rank them with: rlkit label {path} (or on a page: rlkit label serve {path})")
        return 0
    options = sample_options(given)
    # the run's judge, built as its config names it, says which record fields the lines must carry for it
    path, drawn = build_calibration_set(Path(positional[0]), options, run_registry())
    per_window: dict[int, int] = {}
    for (window, _), taken in drawn.strata.items():
        per_window[window] = per_window.get(window, 0) + taken
    windows = ", ".join(f"from step {w}: {n}" for w, n in sorted(per_window.items()))
    print(f"wrote {len(drawn.lines)} of {drawn.available} distinct completions to {path} ({len(drawn.strata)} strata "
          f"of step window x reward slice; {windows}); label them with: rlkit label {path}")
    for note in drawn.notes:
        print(f"note: {note}")
    return 0
