"""The blind comparison page of ``rlkit compare``: each prompt with two answers side by side, for people to say which
is better, never which run wrote which.

The labelling page's machinery (``rlkit.serve.labelling_page``): loopback only, a bearer token in the URL's
``#token=`` fragment, labellers who give their name, every answer saved at once under the file's lock. The page
(``GET /``) holds no data; ``/api/*`` needs the token:

* ``GET /api/items?labeller=NAME``: the items as shown (prompt, reference, left, right, dimensions) with this
  labeller's answers and progress;
* ``POST /api/prefer`` ``{labeller, item, key, what, choice}``: ``what`` is ``overall`` or one of the item's
  dimensions, ``choice`` ``left``, ``right``, ``tie`` or null (skip).

The app reads the comparison file only, never its key (``rlkit.evaluation.blind_comparison``): nothing it sends can
say which side is which run.
"""

# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations (see labelling_page)
from pathlib import Path
from typing import Any

from rlkit.data.records import prompt_text
from rlkit.evaluation.blind_comparison import (
    OVERALL,
    apply_preference,
    line_key,
    progress,
    read_comparison,
    save_preference,
)
from rlkit.evaluation.labelling import LABELLER_NAME_LIMIT
from rlkit.evaluation.labelling_answers import AnswerError
from rlkit.serve.labelling_page import guard_api

COMMAND = "rlkit compare"


def page_item(number: int, line: dict[str, Any], labeller: str) -> dict[str, Any]:
    """Item ``number`` as the page shows it to ``labeller``: the texts and their answers, nothing else."""
    return {"number": number, "key": line_key(line), "prompt": prompt_text(line["prompt"]),
            "reference": None if line.get("reference") is None else str(line["reference"]),
            "left": line["left"], "right": line["right"], "dimensions": list(line.get("dimensions", [])),
            "answers": dict((line.get("preferences") or {}).get(labeller, {}))}


def create_compare_app(path: Path, token: str) -> Any:
    """The comparison page's app for comparison file ``path`` (checked readable first)."""
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse
    from pydantic import BaseModel, Field

    read_comparison(path)
    page_html = (Path(__file__).parent / "comparison_page.html").read_text(encoding="utf-8")
    app = FastAPI(title="rlkit blind comparison", docs_url=None, redoc_url=None, openapi_url=None)

    class Prefer(BaseModel):
        labeller: str = Field(min_length=1, max_length=LABELLER_NAME_LIMIT)
        item: int
        key: str | None = None
        what: str = OVERALL
        choice: str | None

    guard_api(app, token, COMMAND, "the comparison file")

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return page_html

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/items")
    def items(labeller: str) -> dict[str, Any]:
        labeller = labeller.strip()
        if not labeller:
            raise AnswerError("a name is needed, to tell labellers apart", "labeller")
        lines = read_comparison(path)
        return {"labeller": labeller, "items": [page_item(n, line, labeller) for n, line in enumerate(lines, 1)],
                "progress": progress(lines, labeller)}

    @app.post("/api/prefer")
    def prefer(answer: Prefer) -> dict[str, Any]:
        name = answer.labeller.strip()
        if not name:
            raise AnswerError("a name is needed, to tell labellers apart", "labeller")
        line = save_preference(path, answer.item, answer.key,
                               lambda line: apply_preference(line, name, answer.what, answer.choice))
        return {"answers": line["preferences"][name], "progress": progress(read_comparison(path), name)}

    return app
