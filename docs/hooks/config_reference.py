"""mkdocs hook: adds the config reference page, generated from rlkit's schemas on every build.

The page is never written into ``docs/``: ``on_files`` hands mkdocs a generated file, so nothing generated is
committed and the page cannot drift from what ``rlkit validate`` checks.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "config-reference.md"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from rlkit.config.reference import config_reference_markdown

    existing = files.get_file_from_path(PAGE)
    if existing is not None:  # a stale hand-made copy in docs/ must not shadow the generated page
        files.remove(existing)
    files.append(File.generated(config, PAGE, content=config_reference_markdown()))
    return files
