"""The configuration tables of the docs, rendered from the settings' declarations.

Usage: ``python -m tools.settings_doc [--write]`` (``make docs`` writes).

Each document keeps its generated tables between ``<!-- settings:NAME -->`` and
``<!-- /settings:NAME -->``; without ``--write`` the tool prints what they should
say. ``tests/test_settings_doc.py`` fails when a table differs from its
declarations, and when code under libs/, services/, cli/ or devstack/ names a ``PAYCORE_*``
variable that no module listed here declares.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from paycore.settings_spec import FileField, Group, Setting

ROOT = Path(__file__).resolve().parents[1]

# Where each component's settings are declared, and the document that lists them.
DECLARED_IN: dict[str, tuple[str, ...]] = {
    "README.md": ("paycore_cli.common", "paycore.config", "paycore_dispatcher.settings",
                  "paycore.account_settings", "paycore.operators",
                  "paycore_console.credentials", "paycore_console.settings"),
    "docs/recovery.md": ("paycore_recovery.settings",),
    "docs/dispatcher.md": ("paycore_incidents.settings",),
    "services/sandbox/README.md": ("paycore_sandbox.settings",),
    "docs/testing.md": ("harness.settings",),
}
# JSON files whose keys are documented the same way: (document, block, module, attribute).
FILE_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("README.md", "accounts-file", "paycore.account_settings", "ACCOUNTS_FILE_FIELDS"),
    ("services/sandbox/README.md", "config-file", "paycore_sandbox.settings", "CONFIG_FILE_FIELDS"),
)


def groups(module: ModuleType) -> list[Group]:
    """The module's groups, in the order it declares them (a tuple of groups in its order: the
    provider packages' settings, which ``paycore.account_settings`` lists)."""
    return [group for value in vars(module).values()
            for group in (value if isinstance(value, tuple) else (value,)) if isinstance(group, Group)]


def declared() -> dict[str, list[Group]]:
    """Every group, by the document that lists it."""
    return {doc: [g for name in modules for g in groups(importlib.import_module(name))]
            for doc, modules in DECLARED_IN.items()}


def settings() -> list[Setting[Any]]:
    return [s for doc_groups in declared().values() for g in doc_groups for s in g.settings]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_groups(doc_groups: Iterable[Group]) -> str:
    return "\n\n".join(
        f"**{g.governs}**\n\n" + _table(
            ("variable", "default", "accepts", "meaning"),
            ((f"`{s.name}`", s.default_text(), s.kind.accepts(), s.about) for s in g.settings))
        for g in doc_groups)


def render_fields(fields: Iterable[FileField]) -> str:
    return _table(("key", "default", "meaning"), ((f"`{f.key}`", f.default, f.about) for f in fields))


def blocks() -> dict[str, dict[str, str]]:
    """What each document's generated blocks should say: {document: {block: text}}."""
    out: dict[str, dict[str, str]] = {doc: {"settings": render_groups(gs)} for doc, gs in declared().items()}
    for doc, block, module, attribute in FILE_FIELDS:
        out[doc][block] = render_fields(getattr(importlib.import_module(module), attribute))
    return out


def _block(name: str) -> re.Pattern[str]:
    tag = re.escape(name)
    return re.compile(rf"(<!-- settings:{tag} -->\n)(.*?)\n?(<!-- /settings:{tag} -->)", re.S)


def current(text: str, name: str) -> str | None:
    """The block ``name`` as the document has it now, or None when its markers are missing."""
    match = _block(name).search(text)
    return match.group(2) if match else None


def rewrite(text: str, name: str, body: str) -> str:
    replaced, count = _block(name).subn(lambda m: m.group(1) + body + "\n" + m.group(3), text)
    if count != 1:
        raise SystemExit(f"expected one '<!-- settings:{name} -->' block, found {count}")
    return replaced


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.settings_doc", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the blocks in place")
    args = parser.parse_args(argv)
    for doc, doc_blocks in blocks().items():
        path = ROOT / doc
        text = path.read_text(encoding="utf-8")
        for name, body in doc_blocks.items():
            if args.write:
                text = rewrite(text, name, body)
            else:
                out(f"<!-- {doc}: settings:{name} -->\n{body}\n")
        if args.write:
            path.write_text(text, encoding="utf-8")
            out(f"wrote {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
