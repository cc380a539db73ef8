"""Every PAYCORE_* setting is declared once and documented where its component's table is.

The tables in README.md, docs/recovery.md and services/sandbox/README.md are
generated from the declarations (`make docs`, tools/settings_doc.py); this test
fails when one is out of date, when code names a variable nobody declares, or
when a JSON file's documented keys and the keys its reader takes part.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from paycore import account_settings
from paycore.providers.package import entry_keys
from paycore.providers.registry import PROVIDER_PACKAGES
from paycore.settings_spec import Secret, Setting
from paycore_sandbox.settings import CONFIG_FILE_FIELDS, SandboxAccount, SandboxSettings
from tools import settings_doc

ROOT = Path(__file__).resolve().parent.parent
VARIABLE = re.compile(r"PAYCORE_[A-Z0-9_]+")
# Reading a PAYCORE_* variable anywhere but through its declaration.
RAW_READ = re.compile(r"""(?:(?:environ|env)\.get\(|environ\[|getenv\()\s*["']PAYCORE_""")


def _code() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8")
            for top in ("libs", "services", "cli", "devstack") for p in sorted((ROOT / top).rglob("*.py"))}


def test_every_generated_table_is_up_to_date() -> None:
    stale = []
    for doc, doc_blocks in settings_doc.blocks().items():
        text = (ROOT / doc).read_text(encoding="utf-8")
        for name, body in doc_blocks.items():
            if settings_doc.current(text, name) != body:
                stale.append(f"{doc} <!-- settings:{name} -->")
    assert stale == [], "run `make docs` (python -m tools.settings_doc --write)"


def test_every_declared_setting_is_documented_with_its_default() -> None:
    missing = []
    for doc, groups in settings_doc.declared().items():
        text = (ROOT / doc).read_text(encoding="utf-8")
        for setting in (s for g in groups for s in g.settings):
            row = re.search(rf"^\| `{setting.name}` \| (.*?) \|", text, re.M)
            if row is None or row.group(1) != setting.default_text():
                missing.append(f"{setting.name} in {doc}")
    assert missing == []


def test_each_variable_is_declared_once() -> None:
    names = [s.name for s in settings_doc.settings()]
    assert len(names) > 50
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_every_paycore_variable_the_code_names_is_declared() -> None:
    declared = {s.name for s in settings_doc.settings()}
    named = {m for text in _code().values() for m in VARIABLE.findall(text)}
    # "PAYCORE_RECOVERY_*" in a docstring names a family: some declared setting must start with it.
    undeclared = sorted(n for n in named if n not in declared
                        and not (n.endswith("_") and any(d.startswith(n) for d in declared)))
    assert undeclared == []


def test_no_code_reads_a_paycore_variable_around_its_declaration() -> None:
    raw_reads = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
                 for path, text in _code().items() for m in RAW_READ.finditer(text)]
    assert raw_reads == []


def test_every_default_is_within_its_own_bounds() -> None:
    def raw(value: object) -> str:
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return str(value).lower() if isinstance(value, bool) else str(value)

    for setting in settings_doc.settings():
        if setting.default is None or setting.default == ():
            continue
        assert _read(setting, raw(setting.default)) == setting.default, setting.name


def _read(setting: Setting[object], value: str) -> object:
    read = setting.read({setting.name: value})
    return read.reveal() if isinstance(read, Secret) else read


def test_the_accounts_file_keys_are_the_ones_its_reader_takes() -> None:
    # The documented keys are the tag and the entry classes' fields, which load_entry reads; any other
    # key is refused (``_FIELD_NAMES`` is the documented set).
    documented = [f.key for f in account_settings.ACCOUNTS_FILE_FIELDS]
    read = {name for p in PROVIDER_PACKAGES for name in entry_keys(p.file_entry)}
    assert len(documented) == len(set(documented))
    assert set(documented) == {"provider"} | read
    assert set(documented) == account_settings._FIELD_NAMES


def test_the_sandbox_file_keys_are_its_settings_fields() -> None:
    documented = {f.key for f in CONFIG_FILE_FIELDS}
    fields = {f.name for f in dataclasses.fields(SandboxSettings)}
    fields |= {f"accounts[].{f.name}" for f in dataclasses.fields(SandboxAccount)}
    assert documented == fields
