"""The dependency locks: which packages ship in the image, and the ``.in`` files derived from them.

Usage: ``python -m tools.lock write|check|packages`` (``make lock`` writes, then pins).

Two locks, one per use, both pinned with ``--hash``:

- ``requirements/runtime.lock`` -- what the production image installs: the third-party
  dependencies of the runtime packages, nothing else (no database server, broker or test tool);
- ``requirements/dev.lock`` -- what a developer and CI add on top: the local dev stack and
  the test, lint and lock tools. ``dev.in`` starts with ``-c runtime.lock`` so a package both
  need is pinned to the same version in both files;
- ``requirements/build.lock`` -- the workspace packages' build backend (setuptools), which the
  image's builder stage builds wheels with in a virtualenv of its own (``-c dev.lock``: the
  same setuptools ``make venv`` builds the editable installs with).

The ``.in`` files are generated from the pyprojects, so they cannot drift from them;
``tests/deploy/test_image.py`` fails when they differ, or when a name in an ``.in`` file has
no hashed pin in its lock. Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = Path("requirements")

# What ships in the image: one list, read by the Dockerfile test and the image test.
RUNTIME_PACKAGES: tuple[str, ...] = (
    "libs/paycore",
    "services/checkout",
    "services/webhooks",
    "services/recovery",
    "services/dispatcher",
    "services/console",  # the operator console (issue 13)
    "services/incidents",  # incident grouping (issue 14): faust, kept out of the dispatcher
    "services/sandbox",  # small and pure Python: the compose demo runs it from the image
    "cli",  # the `paycore` command: the image's entry point
)
# Workspace packages for development only (the local stack); their dependencies go to dev.in.
DEV_PACKAGES: tuple[str, ...] = ("devstack",)
# Declared by a runtime package but never wanted in the image (none: the embedded PostgreSQL
# server and the local broker are the dev stack's own dependencies).
DEV_ONLY_DEPS: frozenset[str] = frozenset()
# Development tools, with why each is there.
DEV_TOOLS: tuple[tuple[str, str], ...] = (
    ("pytest", "the test runner"),
    ("pytest-asyncio", "async tests"),
    ("pytest-xdist", "make test runs two processes"),
    ("ruff", "lint"),
    ("mypy", "type check"),
    ("adyen", "tests check HMACs with the Adyen SDK's own routine"),
    ("localstripe", "an independent Stripe fake the Stripe adapter is tested against"),
    ("standardwebhooks", "tests check our webhook signatures against the reference library"),
    ("py-spy", "sampling profiler for the benchmarks' services (docs/operations.md, performance)"),
    ("psutil", "tests of the local stack look at its processes"),
    ("kubernetes-validate", "tests/deploy validates the rendered manifests against Kubernetes' schema"),
    ("pyyaml", "tools/deploy_check reads docker-compose.yml and Prometheus' configuration"),
    ("types-PyYAML", "mypy reads tools/deploy_check's YAML loading"),
    ("types-jsonschema", "mypy reads paycore.contracts' jsonschema validators"),
    ("playwright", "tests/console_e2e drive Debian's headless Chromium (never `playwright install`)"),
    ("schemathesis", "tests/openapi fuzz the live services against their OpenAPI documents"),
    ("openapi-spec-validator", "tests/openapi check each service's document is valid OpenAPI 3.1"),
    ("py-spy", "profiling a running service (docs/operations.md, Scale)"),
    ("cosmic-ray", "make mutate-generated: its mutation operators generate the Python mutants"),
    ("coverage", "make mutate-generated: which tests execute each mutated line"),
    ("testcontainers", "make test-containers: PostgreSQL and the broker in containers (docs/testing.md)"),
    ("podman-compose", "make test-deploy brings docker-compose.yml up with podman (Debian's is 1.0.3)"),
    ("uv==0.13.8", "the lock tool: make lock runs `uv pip compile --generate-hashes`"),
)

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")


def canonical(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return canonical(match.group(1))


def _extras(requirement: str) -> set[str]:
    match = _NAME.match(requirement)
    extras = match.group(2) if match else None
    return {canonical(e) for e in extras.strip("[]").split(",") if e.strip()} if extras else set()


def workspace_names(root: Path, packages: Iterable[str]) -> set[str]:
    return {canonical(str(_project(root, p)["name"])) for p in packages}


def _pyproject(root: Path, package: str) -> dict[str, dict[str, object]]:
    with (root / package / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _project(root: Path, package: str) -> dict[str, object]:
    return _pyproject(root, package)["project"]


def build_requires(root: Path, packages: Iterable[str]) -> dict[str, tuple[str, list[str]]]:
    """The packages' build requirements: name -> (the requirement as written, who asks)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for package in packages:
        requires = _pyproject(root, package).get("build-system", {}).get("requires", [])
        assert isinstance(requires, list)
        for requirement in requires:
            name = requirement_name(requirement)
            spelled, sources = found.setdefault(name, (requirement.replace(" ", ""), []))
            if spelled != requirement.replace(" ", ""):
                raise ValueError(f"{package} asks for {requirement!r}, another package for {spelled!r}")
            sources.append(package)
    return found


def declared(root: Path, packages: Iterable[str]) -> dict[str, tuple[set[str], list[str]]]:
    """Third-party dependencies of ``packages``: name -> (extras, the packages declaring it)."""
    packages = tuple(packages)
    ours = workspace_names(root, RUNTIME_PACKAGES + DEV_PACKAGES)
    found: dict[str, tuple[set[str], list[str]]] = {}
    for package in packages:
        dependencies = _project(root, package).get("dependencies", [])
        assert isinstance(dependencies, list)
        for requirement in dependencies:
            name = requirement_name(requirement)
            if name in ours:
                continue
            extras, sources = found.setdefault(name, (set(), []))
            extras |= _extras(requirement)
            sources.append(package)
    return found


def _line(name: str, extras: set[str], why: str) -> str:
    spelled = f"{name}[{','.join(sorted(extras))}]" if extras else name
    return f"{spelled:<28} # {why}"


_HEADER = (
    "# Generated by `python -m tools.lock write` from the pyprojects; do not edit.\n"
    "# Change a pyproject (or tools/lock.py), then run `make lock`.\n"
)


def runtime_in(root: Path = ROOT) -> str:
    deps = declared(root, RUNTIME_PACKAGES)
    lines = [_line(n, e, ", ".join(s)) for n, (e, s) in sorted(deps.items()) if n not in DEV_ONLY_DEPS]
    return _HEADER + "# What the image installs: the runtime packages' third-party dependencies.\n" + (
        "\n".join(lines) + "\n"
    )


def dev_in(root: Path = ROOT) -> str:
    runtime = declared(root, RUNTIME_PACKAGES)
    dev = declared(root, DEV_PACKAGES)
    for name in DEV_ONLY_DEPS & runtime.keys():
        extras, sources = runtime[name]
        dev.setdefault(name, (set(), []))[0].update(extras)
        dev[name][1].extend(f"{s} (dev only)" for s in sources)
    stack = [_line(n, e, ", ".join(s)) for n, (e, s) in sorted(dev.items())]
    backend = [_line(spelled, set(), "make venv builds the editable installs with it (no isolation)")
               for _, (spelled, _) in sorted(build_requires(root, RUNTIME_PACKAGES + DEV_PACKAGES).items())]
    tools = [_line(spec, set(), why) for spec, why in DEV_TOOLS]
    return (
        _HEADER
        + "# What development and CI add to runtime.lock; shared packages keep the runtime pin.\n"
        + "-c runtime.lock\n\n# The local dev stack\n"
        + "\n".join(stack)
        + "\n\n# The workspace's build backend\n"
        + "\n".join(backend)
        + "\n\n# Test, lint and lock tools\n"
        + "\n".join(tools)
        + "\n"
    )


def build_in(root: Path = ROOT) -> str:
    requires = build_requires(root, RUNTIME_PACKAGES)
    lines = [_line(spelled, set(), ", ".join(s)) for _, (spelled, s) in sorted(requires.items())]
    return (
        _HEADER
        + "# What the image's builder stage builds the runtime packages' wheels with.\n"
        + "-c dev.lock\n"
        + "\n".join(lines)
        + "\n"
    )


# Each .in file, rendered, in the order make lock compiles them (each constrains the next).
IN_FILES = (("runtime", runtime_in), ("dev", dev_in), ("build", build_in))


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: tuple[str, ...]


def read_lock(path: Path) -> dict[str, Pin]:
    """The pins of a lock file, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[str, Pin] = {}
    for line in text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[canonical(match.group(1))] = Pin(match.group(2), tuple(_HASH.findall(line)))
    return pins


def read_in(path: Path) -> set[str]:
    """The names an ``.in`` file asks for (options such as ``-c`` skipped)."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(requirement_name(line))
    return names


def problems(root: Path = ROOT) -> list[str]:
    """Why the ``.in`` files or the locks do not match the pyprojects; empty when they do."""
    found = []
    req = root / REQUIREMENTS
    for stem, render in IN_FILES:
        path = req / f"{stem}.in"
        if not path.exists() or path.read_text() != render(root):
            found.append(f"{REQUIREMENTS / path.name} differs from the pyprojects: run `make lock`")
    locks = {}
    for stem, _ in IN_FILES:
        lock = req / f"{stem}.lock"
        if not lock.exists():
            found.append(f"{REQUIREMENTS / lock.name} is missing: run `make lock`")
            continue
        locks[stem] = pins = read_lock(lock)
        wanted = read_in(req / f"{stem}.in") if (req / f"{stem}.in").exists() else set()
        for name in sorted(wanted - pins.keys()):
            found.append(f"{name} is in {stem}.in but not pinned in {lock.name}: run `make lock`")
        for name, pin in sorted(pins.items()):
            if not pin.hashes:
                found.append(f"{name}=={pin.version} in {lock.name} has no --hash")
    for one, other in (("runtime", "dev"), ("dev", "build")):
        if one in locks and other in locks:
            for name in sorted(locks[one].keys() & locks[other].keys()):
                if locks[one][name] != locks[other][name]:
                    found.append(f"{name} is pinned differently in {one}.lock and {other}.lock")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.lock", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("write", "check", "packages"),
                        help="write the .in files; check them and the locks; print the runtime packages")
    args = parser.parse_args(argv)
    if args.action == "packages":
        print(" ".join(RUNTIME_PACKAGES))
        return 0
    if args.action == "write":
        (ROOT / REQUIREMENTS).mkdir(exist_ok=True)
        for stem, render in IN_FILES:
            (ROOT / REQUIREMENTS / f"{stem}.in").write_text(render())
        return 0
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
