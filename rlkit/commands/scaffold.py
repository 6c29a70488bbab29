"""``rlkit new plugin NAME --kind KIND``: an installable plugin package rendered from ``templates/plugin/``."""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rlkit.config.outputs import check_writable
from rlkit.core.errors import ConfigError
from rlkit.core.kinds import KINDS, PluginKind


@dataclass(frozen=True)
class ScaffoldKind:
    """What a generated plugin of one kind needs, read from the kind's entry in ``rlkit.core.kinds.KINDS``."""

    kind: PluginKind

    @property
    def key(self) -> str:
        """The registry's kind key."""
        return self.kind.key

    @property
    def contract(self) -> str:
        """The suite in ``rlkit.testing`` the generated tests run."""
        return self.kind.contract

    @property
    def fixture(self) -> str:
        """The fixture that suite asks for."""
        return self.kind.fixture

    @property
    def suffix(self) -> str:
        """Of the generated class name."""
        return self.kind.suffix

    @property
    def selects(self) -> tuple[str, ...]:
        """Further overrides its config needs to be used (a constructor needs group_dpo)."""
        return self.kind.selects

    @property
    def list_group(self) -> bool:
        """Selected as a list (``monitors=[NAME]``, ``audit.probes=[NAME]``), not by one name."""
        return self.kind.listed

    @property
    def config(self) -> bool:
        """Whether the package ships ``conf/<group>/NAME.yaml``: only for a kind a config group selects (an audit
        probe is named in ``audit.probes``)."""
        return self.kind.selected_by is None


# --kind names are the kinds' template folders (templates/plugin/kinds/<name>/): the config group users type
# (judge=..., advantage=...) except `monitor` (the group is the list `monitors`) and `probe` (no group selects it)
SCAFFOLD_KINDS: dict[str, ScaffoldKind] = {k.scaffold: ScaffoldKind(k) for k in KINDS if k.scaffold}
NAME = re.compile(r"[a-z][a-z0-9_]*")

USAGE = """rlkit new plugin NAME --kind {kinds} [--dir DIR] [--package PACKAGE]

Writes an installable package (default folder ./rlkit-NAME, package rlkit_NAME): pyproject.toml with its
`rlkit` entry point, PACKAGE/__init__.py with a working plugin registered as NAME, PACKAGE/conf/<group>/NAME.yaml
(so `<group>=NAME` selects it once installed) and tests/test_NAME.py running rlkit's contract suite for the kind.
A probe ships no YAML: no config group selects it, `rlkit rubric audit` runs every probe or those audit.probes names.
Then: pip install -e DIR && pytest DIR/tests && rlkit validate <group>=NAME
(a probe: ... && rlkit rubric audit audit.records=FILE.jsonl audit.probes=[NAME])"""


def available_kinds() -> dict[str, ScaffoldKind]:
    """The kinds a plugin can be generated for: those whose contract suite and templates both exist."""
    import rlkit.testing

    root = templates_root()
    return {kind: spec for kind, spec in SCAFFOLD_KINDS.items()
            if hasattr(rlkit.testing, spec.contract)
            and (root / "kinds" / kind / "module.py.jinja").is_file()}


def templates_root() -> Path:
    """``templates/plugin`` as installed (``rlkit.templates`` in a wheel, the repository's folder when editable)."""
    return Path(str(resources.files("rlkit.templates"))) / "plugin"


def check_name(name: str, what: str) -> str:
    """A lower-case Python identifier: it is the config name, the entry-point name and part of the package."""
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ConfigError(f"{what} must be a lower-case Python identifier ([a-z][a-z0-9_]*), got {name!r}",
                          f"rlkit new plugin {what}")
    return name


def _class_name(name: str, suffix: str) -> str:
    camel = "".join(part.capitalize() for part in name.split("_"))
    return camel if camel.endswith(suffix) else camel + suffix


def selector(name: str, kind: str) -> str:
    """The override that selects plugin ``name`` of ``kind``: ``judge=NAME``, ``monitors=[NAME]`` for a list, or
    the setting that names it for a kind no config group selects (``audit.probes=[NAME]``)."""
    return SCAFFOLD_KINDS[kind].kind.selector(name)


def next_step(name: str, kind: str, target: Path | str) -> str:
    """The commands to run after generating: install, the package's tests, then use it."""
    select = selector(name, kind)
    # only the audit builds probes (`rlkit validate` does not look up audit.probes), so it is the check for one
    use = (f"rlkit validate {select}" if SCAFFOLD_KINDS[kind].config
           else f"rlkit rubric audit audit.records=FILE.jsonl {select}")
    return f"pip install -e {target} && pytest {target}/tests && {use}"


def render_plugin(name: str, kind: str, target: Path, package: str | None = None) -> list[Path]:
    """Write the plugin package for ``name`` of ``kind`` into ``target`` (new or empty); return the files written."""
    import jinja2

    import rlkit

    kinds = available_kinds()
    if kind not in kinds:
        raise ConfigError(f"unknown kind {kind!r}; kinds: {', '.join(kinds)}", "rlkit new plugin --kind")
    check_name(name, "NAME")
    package = check_name(package or f"rlkit_{name}", "--package")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError("exists and is not an empty folder; choose another --dir", str(target))
    check_writable(target, "--dir", folder=True)
    spec = kinds[kind]
    registry_kind = spec.kind
    overrides = [*spec.selects, selector(name, kind)]
    variables = {
        "name": name, "kind": kind, "package": package, "dist": package.replace("_", "-"),
        "class_name": _class_name(name, spec.suffix), "group": registry_kind.group, "hook": registry_kind.hook,
        "kind_key": spec.key, "contract": spec.contract, "fixture": spec.fixture,
        "protocol": registry_kind.protocol.__name__,
        "overrides": ", ".join(f'"{o}"' for o in overrides), "selector": selector(name, kind),
        "config": spec.config, "setting": registry_kind.setting,
        "rlkit_version": rlkit.__version__,
    }
    root = templates_root()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    config = {f"{package}/conf/{registry_kind.group}/{name}.yaml": f"kinds/{kind}/config.yaml.jinja"}
    files = {
        "pyproject.toml": "pyproject.toml.jinja",
        "README.md": "README.md.jinja",
        f"{package}/__init__.py": f"kinds/{kind}/module.py.jinja",
        **(config if spec.config else {}),
        f"tests/test_{name}.py": "test.py.jinja",
    }
    written = []
    for relative, template in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(env.get_template(template).render(**variables), encoding="utf-8")
        written.append(path)
    if not spec.config:
        return written
    # Hydra's pkg:// search path imports the conf folder, so it is a package
    conf_init = target / package / "conf" / "__init__.py"
    conf_init.write_text(f'"""Config groups shipped by {variables["dist"]}."""\n', encoding="utf-8")
    return [*written, conf_init]


def main(args: Sequence[str]) -> int:
    """The ``rlkit new`` command."""
    kinds = available_kinds()
    usage = USAGE.format(kinds="|".join(kinds))
    parser = argparse.ArgumentParser(prog="rlkit new", usage=usage, add_help=False)
    parser.add_argument("what", nargs="?")
    parser.add_argument("name", nargs="?")
    parser.add_argument("--kind")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--package")
    parser.add_argument("-h", "--help", action="store_true")
    options, unknown = parser.parse_known_args(list(args))
    if options.help:
        print(usage)
        return 0
    if unknown or options.what != "plugin" or not options.name or not options.kind:
        problem = f"unexpected {' '.join(unknown)!r}; " if unknown else ""
        print(f"rlkit: error: {problem}usage: {usage.splitlines()[0]} (rlkit new --help)", file=sys.stderr)
        return 2
    target = options.dir or Path(f"rlkit-{options.name.replace('_', '-')}")
    files = render_plugin(options.name, options.kind, target, options.package)
    print(f"wrote {len(files)} files to {target}:")
    for path in files:
        print(f"  {path.relative_to(target)}")
    print(f"next: {next_step(options.name, options.kind, target)}")
    return 0
