"""rlkit's rubric rewards inside other trainers: TRL ``reward_funcs`` (``rlkit.integrations.trl``), veRL's
``compute_score`` (``rlkit.integrations.verl``), both over one :class:`~rlkit.integrations.scorer.RubricScorer`.

Neither TRL nor veRL is imported here: the functions follow their call contracts, so installing rlkit does not
pull either trainer in.
"""

from rlkit.integrations.scorer import FlatScores, RubricScorer, load_validated
from rlkit.integrations.trl import TrlRewards, trl_reward_funcs

__all__ = ["FlatScores", "RubricScorer", "TrlRewards", "load_validated", "trl_reward_funcs"]
