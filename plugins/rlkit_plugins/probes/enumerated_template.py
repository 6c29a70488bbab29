"""``enumerated_template``: the completion wrapped in the "First… Second… Finally…" template the rubric design note
warns about (the pattern the ``template_phrases`` monitor counts during training): structure without substance."""

from __future__ import annotations

from typing import Any

from rlkit.plugin import Rubric, hookimpl

TEMPLATE = ("First, let me consider carefully what is being asked.\n"
            "Second, let me work through it step by step.\n"
            "Finally, the answer is: {completion}")


class EnumeratedTemplate:
    """Wraps the answer in a First/Second/Finally template."""

    description = 'the answer wrapped in a "First… Second… Finally…" template'

    def __init__(self, params: Any = None) -> None:
        pass

    def game(self, record: dict[str, Any], rubric: Rubric) -> str | None:
        return TEMPLATE.format(completion=record["completion"])


@hookimpl
def rlkit_register_audit_probes(register):
    register("enumerated_template", EnumeratedTemplate)
