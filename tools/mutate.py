"""``make mutate``: break each money-guarding condition on purpose; a named test must notice.

Usage: ``python -m tools.mutate [--only NAME ...] [--tests NODE ...] [--list] [--keep]``

The repository is never touched. Its files (tracked, plus untracked ones not
ignored, as they are in the working tree now) are copied into a temporary
directory; each mutation is applied to the copy, the mutation's tests run there
with ``pytest -x`` and the copy's package directories first on ``PYTHONPATH``
(ahead of the editable installs; checked before anything runs), and the file is
put back before the next one. A mutation whose original text is not found
exactly once is reported ``stale``, never skipped. Exit status 0 only when every
selected mutation was killed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tools.mutations import MUTATIONS, Mutation

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 900.0
SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) (\S+)")
TIMED_OUT = "killed (timeout)"


@dataclass
class Result:
    mutation: Mutation
    status: str  # killed | killed (timeout) | survived | stale | error
    detail: str = ""  # the killing test and its first failure line, or why
    seconds: float = 0.0


# -- the copy ------------------------------------------------------------------------------------


def copy_tree(root: Path, dest: Path) -> None:
    """Copy the working tree's files as they are now (tracked and untracked, not ignored)."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = root / rel
        if source.is_file():  # a tracked file deleted in the working tree is left out
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def package_dirs(tree: Path) -> list[Path]:
    """Every workspace package directory of the copy: libs/*, services/*, cli/ and devstack/."""
    found = [*tree.glob("libs/*/pyproject.toml"), *tree.glob("services/*/pyproject.toml"),
             *tree.glob("cli/pyproject.toml"), *tree.glob("devstack/pyproject.toml")]
    return sorted(p.parent for p in found)


def run_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(p) for p in package_dirs(tree)] + [str(tree)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    # No bytecode: a mutation of the same size written in the same second as the
    # original could otherwise be served from a stale .pyc.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def module_of(tree: Path, rel: str) -> str:
    """``libs/paycore/paycore/attempts.py`` -> ``paycore.attempts``; a data file, the module of its
    folder (``paycore/queries/payment_attempts.sql`` -> ``paycore.queries``, which reads it)."""
    path = tree / rel
    if path.suffix != ".py":
        path = path.parent
    for pkg in package_dirs(tree):
        if path.is_relative_to(pkg):
            return ".".join(path.relative_to(pkg).with_suffix("").parts) if path.suffix == ".py" \
                else ".".join(path.relative_to(pkg).parts)
    raise ValueError(f"{rel} is not inside a workspace package")


def check_imports_come_from(tree: Path, env: dict[str, str], modules: list[str]) -> None:
    """Each module a mutation touches must be imported from the copy, not the editable install."""
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    print(name, importlib.import_module(name).__file__)\n")
    out = subprocess.run([sys.executable, "-c", code, *modules], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        name, file = line.split(" ", 1)
        if not Path(file).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"mutate: {name} is imported from {file}, not from the copy {tree}; "
                             "refusing to run (a mutation there would test nothing)")


# -- running -------------------------------------------------------------------------------------


def pytest(tree: Path, env: dict[str, str], tests: tuple[str, ...]) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE", *tests]
    try:
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, ""
    return done.returncode, done.stdout + done.stderr


def first_failure(output: str) -> str:
    """``node id: first error line`` of the first failing test."""
    lines = output.splitlines()
    node = next((m.group(2) for m in map(SUMMARY_LINE.match, lines) if m), "(no summary line)")
    error = next((line[1:].strip() for line in lines if line.startswith("E ")), "")
    return f"{node}: {error[:300]}" if error else node


@contextlib.contextmanager
def mutated(target: Path, text: str) -> Iterator[None]:
    """``target`` holds ``text`` inside the block and its own text again after, whatever happens."""
    pristine = target.read_text()
    target.write_text(text)
    try:
        yield
    finally:
        target.write_text(pristine)


def run_one(tree: Path, env: dict[str, str], m: Mutation, tests: tuple[str, ...]) -> Result:
    target = tree / m.file
    if not target.is_file():
        return Result(m, "stale", f"{m.file} does not exist")
    pristine = target.read_text()
    found = pristine.count(m.original)
    if found != 1:
        return Result(m, "stale", f"original text found {found} times in {m.file}")
    start = time.monotonic()
    with mutated(target, pristine.replace(m.original, m.replacement)):
        code, output = pytest(tree, env, tests)
    took = time.monotonic() - start
    if code == 0:
        return Result(m, "survived", "every listed test passed", took)
    if code == 1:
        return Result(m, "killed", first_failure(output), took)
    if code == -1:
        # Counted as killed (a hang is noticed), but shown apart: the guard may only have
        # made a test wait, not fail; read that test before trusting the kill.
        return Result(m, TIMED_OUT, f"no test failed: pytest was stopped after {RUN_TIMEOUT_S:.0f} s", took)
    # 2 interrupted (e.g. the mutation does not import), 4 usage (a test id not found), 5 no tests.
    tail = " | ".join(output.strip().splitlines()[-3:])
    return Result(m, "error", f"pytest exit {code}: {tail}", took)


def baseline(tree: Path, env: dict[str, str], selected: list[Mutation], override: tuple[str, ...]) -> None:
    """Every named test must pass on the unmutated copy, or a 'killed' would mean nothing."""
    tests = override or tuple(dict.fromkeys(t for m in selected for t in m.tests))
    print(f"baseline: {len(tests)} test ids on the unmutated copy ...", flush=True)
    start = time.monotonic()
    code, output = pytest(tree, env, tests)
    if code != 0:
        print(output[-4000:])
        raise SystemExit(f"mutate: the named tests fail unmutated (pytest exit {code}); fix that first")
    print(f"baseline: green in {time.monotonic() - start:.0f} s", flush=True)


# -- reporting -----------------------------------------------------------------------------------


def table(results: list[Result]) -> str:
    width = max(len(r.mutation.name) for r in results)
    status = max(8, *(len(r.status) for r in results))
    lines = [f"{'mutation':<{width}}  {'result':<{status}}  {'s':>4}  killing test / detail",
             "-" * (width + status + 52)]
    for r in results:
        lines.append(f"{r.mutation.name:<{width}}  {r.status:<{status}}  {r.seconds:>4.0f}  {r.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutate", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this mutation (repeatable)")
    parser.add_argument("--tests", nargs="+", default=[], metavar="NODE",
                        help="run these tests instead of the listed ones (to find a killer)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy (prints its path)")
    args = parser.parse_args(argv)

    names = [m.name for m in MUTATIONS]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise SystemExit(f"mutate: duplicate mutation names: {sorted(duplicates)}")
    unknown = [n for n in args.only if n not in names]
    if unknown:
        raise SystemExit(f"mutate: no mutation named {', '.join(unknown)} (see --list)")
    selected = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.list:
        for m in selected:
            print(f"{m.name}: {m.file} -- {m.guards}")
            for test in m.tests:
                print(f"    {test}")
        return 0

    override = tuple(args.tests)
    tmp = Path(tempfile.mkdtemp(prefix="paycore-mutate-"))
    try:
        tree = tmp / "tree"
        copy_tree(ROOT, tree)
        env = run_env(tree)
        modules = sorted({module_of(tree, m.file) for m in selected if (tree / m.file).is_file()})
        check_imports_come_from(tree, env, modules)
        print(f"mutate: {len(selected)} mutations on a copy at {tree} ({', '.join(modules)} import from it)",
              flush=True)
        if not args.no_baseline:
            baseline(tree, env, selected, override)
        results: list[Result] = []
        for i, m in enumerate(selected, 1):
            print(f"[{i:>2}/{len(selected)}] {m.name} ...", end=" ", flush=True)
            r = run_one(tree, env, m, override or m.tests)
            results.append(r)
            print(f"{r.status} ({r.seconds:.0f} s) {r.detail}", flush=True)
    finally:
        if args.keep:
            print(f"mutate: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(table(results))
    statuses = ("killed", TIMED_OUT, "survived", "stale", "error")
    counts = {s: sum(r.status == s for r in results) for s in statuses}
    print("\n" + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(results)}")
    return 0 if counts["killed"] + counts[TIMED_OUT] == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
