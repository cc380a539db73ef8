"""A provider is a package: what paycore knows about one provider sits in
``libs/paycore/paycore/providers/<name>/``, and the code outside names no provider.

The scan reads every Python file outside the provider packages for a provider's name as an
identifier or in a string (``cardco``, ``CARDCO_…``, ``CardcoClient``, ``"/webhooks/cardco"``;
comments and docstrings are prose and do not count). A file that names one must be on
:data:`ALLOWED`, each entry saying why; an entry nothing matches any more fails too, so the
list only shrinks as the rest moves into the packages.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from paycore.providers.registry import PROVIDERS

ROOT = Path(__file__).resolve().parents[2]
PROVIDERS_DIR = ROOT / "libs" / "paycore" / "paycore" / "providers"
SCANNED = ("libs", "services", "cli", "devstack", "harness", "tools", "bench", "tests")

# Where a provider is named outside its package: a path, or a folder ending in "/". Shipped
# code names none but the registry's list; the rest is what a person reads, a wire served by
# design, or what tests and measures each provider.
ALLOWED: dict[str, str] = {
    # For good: the one list of the provider packages (adding a provider is one line there).
    "libs/paycore/paycore/providers/registry.py": "PROVIDER_PACKAGES",
    # What a person reads: help texts, descriptions and examples that name a provider.
    "libs/paycore/paycore/providers/package.py":
        "the accounts file's shared keys' descriptions, which the docs' table is generated from",
    "cli/paycore_cli/common.py": "`paycore up`'s help: the wires the sandbox speaks, the intake's routes",
    "cli/paycore_cli/parser.py":
        "help texts: the sandbox's wires, examples (cardco:acct_store:live, PAYCORE_CARDCO_*)",
    "cli/paycore_cli/operation_commands.py": "help texts' example settings (PAYCORE_CARDCO_*)",
    "cli/paycore_cli/settlement_commands.py":
        "help texts: each provider's settings and settlement report file, an example account",
    "services/recovery/paycore_recovery/settings.py": "a setting's description (Stripe's Search)",
    # Each provider's wire by design.
    "services/sandbox/": "the sandbox speaks each provider's wire (its dialects)",
    "tools/deploy_check/kubernetes_model.py":
        "the rendered prod variants pick providers' kustomize components (provider-stripe, ...)",
    "tools/lock.py": "names the Stripe SDK's distribution",
    # What tests and measures each provider.
    "tests/": "each provider's own tests and fixtures",
    "tools/mutations.py": "the curated mutations of each provider's modules and the tests that kill them",
    "tools/mutants_judged.py": "judgements of the generated mutants of each provider's modules",
    "bench/": "a bench configures the sandbox's Cardco to measure against",
}


def _pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    spellings = sorted({s for n in names for s in (n, n.capitalize(), n.upper())})
    # Not inside a longer word: CARDCO_BASE_URL and StripeProvider match, "adyenish" does not.
    return re.compile(rf"(?<![A-Za-z])(?:{'|'.join(map(re.escape, spellings))})(?![a-z])")


def _docstrings(tree: ast.AST) -> set[tuple[int, int]]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add((first.lineno, first.col_offset))
    return found


def naming_files() -> dict[str, int]:
    """Each scanned file outside the provider packages that names a provider, with its count."""
    pattern = _pattern(tuple(PROVIDERS))
    packages = {p.parent for p in PROVIDERS_DIR.glob("*/__init__.py")}
    found: dict[str, int] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ".venv" in path.parts or any(path.is_relative_to(p) for p in packages):
                continue
            source = path.read_text(encoding="utf-8")
            docstrings = _docstrings(ast.parse(source))
            count = sum(len(pattern.findall(tok.string))
                        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                        if tok.type == tokenize.NAME
                        or (tok.type == tokenize.STRING and tok.start not in docstrings))
            if count:
                found[str(path.relative_to(ROOT))] = count
    return found


def _entry(path: str) -> str | None:
    return next((e for e in ALLOWED if path == e or (e.endswith("/") and path.startswith(e))), None)


def test_the_scan_sees_the_provider_packages_names() -> None:
    assert _pattern(("cardco",)).findall('CardcoClient cardco_x "PAYCORE_CARDCO_API_KEY" cardcoish') == [
        "Cardco", "cardco", "CARDCO"]


def test_only_the_allowed_places_outside_the_provider_packages_name_a_provider() -> None:
    found = naming_files()
    assert {path: count for path, count in found.items() if _entry(path) is None} == {}
    used = {_entry(path) for path in found}
    assert sorted(set(ALLOWED) - used) == []  # moved: take the entry off the list
