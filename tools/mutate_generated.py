"""``make mutate-generated``: mutants nobody chose, over the money modules; each must be killed.

Usage: ``python -m tools.mutate_generated [--module PATH ...] [--workers N] [--budget-min M]
[--max-tests N] [--resume] [--report PATH]``

``make mutate`` runs a curated list: it misses what its authors did not think of (an outside
audit found six such guards, issue 26). This run generates its mutants instead:

1. **Python**, by cosmic-ray's operators (``cosmic_ray.plugins``) over :data:`PYTHON_TARGETS`:
   comparisons (each to its negation and its boundary neighbour), ``and``/``or``, ``not``
   added and removed, ``True``/``False``, numbers (+1 and -1), arithmetic to its inverse, an
   ``except`` clause's exception, a loop run zero times, ``break``/``continue``. Mutants inside
   annotations are not made (``from __future__ import annotations``: never evaluated).
2. **SQL**, by :mod:`tools.sql_mutants` over the named queries of :data:`SQL_TARGETS` and the
   migrations' constraints: each ``WHERE`` conjunct dropped or its comparison flipped, each
   ``ORDER BY``, row lock, ``SKIP LOCKED`` and ``ON CONFLICT … DO NOTHING`` removed, each
   ``COALESCE`` swapped, each ``CHECK`` and uniqueness dropped.

Which tests run for a mutant: the suites of :data:`SUITES` run once under coverage with a
context per test, so each line knows the tests that execute it. A mutant runs the tests that
execute its line (for a named query, the tests that execute a function of
:data:`SQL_CALLERS` naming it; for a module-level constant, the tests that execute a function
naming it; for a migration, the schema tests and the matrix), the fastest first,
at most ``--max-tests`` of them (taken round-robin across their files), with ``pytest -x``; a
mutant that survives that sample runs again with every covering test (``--confirm-tests``, up
to 1,000: a sample missed the one test that kills it more than once), and only then counts as
a survivor (the report says how many of the covering tests ran).

Everything runs in copies of the working tree (one per worker), never in the repository.
Each result is appended to the report (JSON lines) as it comes, so ``--resume`` continues an
interrupted run. At the end: counts per module, then every survivor with its diff, each
either judged in :mod:`tools.mutants_judged` (equivalent, or not worth a test, and why) or
listed as unexplained; the exit status is 0 only when no survivor is unexplained.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import hashlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from tools.mutants_judged import JUDGED, Judged
from tools.mutate import check_imports_come_from, copy_tree, module_of, run_env
from tools.mutate import mutated as mutated_file  # the target holds a mutant's text, then its own
from tools.sql_mutants import mutants_of as sql_mutants_of
from tools.sql_mutants import query_at

ROOT = Path(__file__).resolve().parents[1]
LIB = "libs/paycore/paycore"


def provider_money_modules() -> tuple[str, ...]:
    """Each registered provider package's wire and notifications (``events.py`` or
    ``notifications.py``), as the registry lists the packages."""
    from paycore.providers.registry import PROVIDER_PACKAGES

    found: list[str] = []
    for package in PROVIDER_PACKAGES:
        home = Path(LIB).parent.joinpath(*type(package).__module__.split(".")[:-1])
        found += [str(home / f"{m}.py") for m in ("wire", "events", "notifications")
                  if (ROOT / home / f"{m}.py").exists()]
    return tuple(found)


# The money modules the issue names: evidence, the state rules, the one writer of outcomes,
# each provider's wire and notifications, the webhook signature.
PYTHON_TARGETS: tuple[str, ...] = (
    f"{LIB}/evidence.py",
    f"{LIB}/domain.py",
    f"{LIB}/attempts.py",
    f"{LIB}/writer.py",
    f"{LIB}/webhook_signatures.py",
    *provider_money_modules(),
    f"{LIB}/settlements.py",
)
# Whose queries are mutated: every statement on an attempt, its lease, the operations after it
# (captures, cancels, refunds), outbox rows (the relay's claims among them), escalations, orders,
# history events and replayed deliveries (named queries, docs/decisions/0007-named-queries.md).
# The order is the run's (and --skip's): money first.
SQL_TARGETS: tuple[str, ...] = tuple(f"{LIB}/queries/{table}.sql" for table in (
    "payment_attempts", "payment_operations", "outbox_messages", "payment_escalations", "orders",
    "payment_attempt_events", "webhook_deliveries_seen", "settlement_lines", "settlement_exceptions"))
# The modules that run those queries: a query's mutant runs the tests that execute a function
# naming it (the coverage map covers these too).
SQL_CALLERS: tuple[str, ...] = (
    f"{LIB}/attempt_row.py", f"{LIB}/attempts.py", f"{LIB}/writer.py", f"{LIB}/leases.py",
    f"{LIB}/orders.py", f"{LIB}/outbox.py", f"{LIB}/escalations.py", f"{LIB}/events.py",
    f"{LIB}/notifications.py", f"{LIB}/dead_ends.py", f"{LIB}/conflicts.py", f"{LIB}/webhook_replays.py",
    "services/dispatcher/paycore_dispatcher/relay.py", f"{LIB}/settlements.py", f"{LIB}/operations.py",
)
MIGRATIONS = f"{LIB}/migrations"
# The suites whose tests may kill a mutant (not the chaos runs, the browser or the deployment).
SUITES: tuple[str, ...] = ("tests/unit", "tests/matrix", "tests/webhooks", "tests/checkout",
                           "tests/operators", "tests/providers", "tests/provider_conformance",
                           "tests/operations", "tests/dispatcher", "tests/settlement")
MIGRATION_TESTS: tuple[str, ...] = ("tests/matrix",)

# cosmic-ray's operators, narrowed to one boundary and one negation per comparison and the
# inverse of each arithmetic operator (its full cross product is ~10 mutants per operator).
COMPARISONS = {"Eq": ("NotEq",), "NotEq": ("Eq",), "Lt": ("LtE", "GtE"), "LtE": ("Lt", "Gt"),
               "Gt": ("GtE", "LtE"), "GtE": ("Gt", "Lt"), "Is": ("IsNot",), "IsNot": ("Is",)}
ARITHMETIC = {"Add": "Sub", "Sub": "Add", "Mul": "Div", "Div": "Mul", "FloorDiv": "Mul", "Mod": "FloorDiv",
              "BitOr": "BitAnd", "BitAnd": "BitOr"}
OTHER_OPERATORS = ("AddNot", "ReplaceUnaryOperator_Delete_Not", "ReplaceUnaryOperator_USub_UAdd",
                   "ReplaceTrueWithFalse", "ReplaceFalseWithTrue", "ReplaceAndWithOr", "ReplaceOrWithAnd",
                   "ReplaceBreakWithContinue", "ReplaceContinueWithBreak", "ExceptionReplacer",
                   "NumberReplacer", "ZeroIterationForLoop")


def operator_names() -> list[str]:
    names = [f"core/ReplaceComparisonOperator_{a}_{b}" for a, bs in COMPARISONS.items() for b in bs]
    names += [f"core/ReplaceBinaryOperator_{a}_{b}" for a, b in ARITHMETIC.items()]
    return names + [f"core/{n}" for n in OTHER_OPERATORS]


# -- mutants ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One generated change to one file of the pristine tree."""

    file: str
    kind: str  # python | sql
    operator: str
    line: int
    occurrence: int = -1  # python: the operator's occurrence in the file
    start: int = -1  # sql: the replaced character range and its replacement
    end: int = -1
    replacement: str = ""

    @property
    def id(self) -> str:
        raw = "|".join(str(v) for v in (self.file, self.kind, self.operator, self.occurrence, self.start,
                                         self.end, self.replacement))
        return hashlib.sha1(raw.encode()).hexdigest()[:12]

    def apply(self, source: str) -> str | None:
        if self.kind == "sql":
            return source[:self.start] + self.replacement + source[self.end:]
        import cosmic_ray.plugins
        from cosmic_ray.mutating import mutate_code

        operator = cosmic_ray.plugins.get_operator(self.operator)()
        mutated: str | None = mutate_code(source, operator, self.occurrence)
        return mutated


def _unmutated_ranges(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where nothing is mutated, as ((line, col), (end line, end col)): annotations (never
    evaluated here), parameter lists (cosmic-ray takes a keyword-only ``*`` for a product) and
    decorators (``@dataclass(frozen=True)``: a class's shape, not a behaviour a test can see)."""
    ranges = []
    for node in ast.walk(ast.parse(source)):
        annotations: list[ast.expr | None] = []
        for decorator in getattr(node, "decorator_list", []):
            if decorator.end_lineno is not None and decorator.end_col_offset is not None:
                ranges.append(((decorator.lineno, decorator.col_offset),
                               (decorator.end_lineno, decorator.end_col_offset)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            ranges.append(((node.lineno, node.col_offset), (node.body[0].lineno, 0)))
            args = node.args
            annotations += [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
            annotations += [args.vararg.annotation if args.vararg else None,
                            args.kwarg.annotation if args.kwarg else None, node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for a in annotations:
            if a is not None and a.end_lineno is not None and a.end_col_offset is not None:
                ranges.append(((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)))
    return ranges


def python_mutants(file: str, source: str) -> list[Mutant]:
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast

    module = get_ast(source)
    skip = _unmutated_ranges(source)
    lines = source.splitlines()
    found: list[Mutant] = []
    for name in operator_names():
        operator = cosmic_ray.plugins.get_operator(name)()
        positions = [start for node in ast_nodes(module) for start, _ in operator.mutation_positions(node)]
        for occurrence, (line, col) in enumerate(positions):
            if any(a <= (line, col) < b for a, b in skip):
                continue
            if "pragma: no mutate" in lines[line - 1]:
                continue
            found.append(Mutant(file, "python", name, line, occurrence=occurrence))
    return found


def all_mutants(tree: Path, modules: Iterable[str]) -> list[Mutant]:
    chosen = set(modules)
    found: list[Mutant] = []
    for file in PYTHON_TARGETS:
        if not chosen or file in chosen:
            found += python_mutants(file, (tree / file).read_text())
    for file in SQL_TARGETS:
        if not chosen or file in chosen:
            for m in sql_mutants_of(file, (tree / file).read_text()):
                found.append(Mutant(file, "sql", m.operator, m.line, start=m.start, end=m.end,
                                    replacement=m.replacement))
    for path in sorted((tree / MIGRATIONS).glob("*.sql")):
        file = str(path.relative_to(tree))
        if not chosen or file in chosen or MIGRATIONS in chosen:
            for m in sql_mutants_of(file, path.read_text()):
                found.append(Mutant(file, "sql", m.operator, m.line, start=m.start, end=m.end,
                                    replacement=m.replacement))
    return found


# -- which tests execute which line ----------------------------------------------------------------


@dataclass
class CoverageMap:
    """For each file and line, the node ids of the tests that executed it; each test's seconds."""

    lines: dict[str, dict[int, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    seconds: dict[str, float] = field(default_factory=dict)

    def tests_of(self, file: str, lines: Iterable[int]) -> set[str]:
        by_line = self.lines.get(file, {})
        return set().union(*(by_line.get(n, set()) for n in lines))

    def all_tests_of(self, file: str) -> set[str]:
        return set().union(*self.lines.get(file, {}).values())

    def save(self, path: Path) -> None:
        lines = {f: {str(n): sorted(t) for n, t in by_line.items()} for f, by_line in self.lines.items()}
        path.write_bytes(orjson.dumps({"lines": lines, "seconds": self.seconds}))

    @classmethod
    def load(cls, path: Path) -> CoverageMap:
        raw = orjson.loads(path.read_bytes())
        mapping = cls(seconds=raw["seconds"])
        for f, by_line in raw["lines"].items():
            for n, tests in by_line.items():
                mapping.lines[f][int(n)] = set(tests)
        return mapping


def _suite_files(tree: Path, suites: Iterable[str]) -> list[str]:
    files = []
    for suite in suites:
        path = tree / suite
        found = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        files += [str(p.relative_to(tree)) for p in found]
    return files


def _split_by_duration(files: list[str], parts: int) -> list[list[str]]:
    known: dict[str, float] = orjson.loads((ROOT / "tests/file_durations.json").read_bytes())
    buckets: list[list[str]] = [[] for _ in range(parts)]
    loads = [0.0] * parts
    for f in sorted(files, key=lambda f: -known.get(f, 1.0)):
        i = loads.index(min(loads))
        buckets[i].append(f)
        loads[i] += known.get(f, 1.0)
    return buckets


def map_coverage(trees: list[Path], targets: list[str], suites: Iterable[str], out: Path) -> CoverageMap:
    """Run the suites once under coverage, split across the workers' trees; read who ran what."""
    import coverage

    buckets = _split_by_duration(_suite_files(trees[0], suites), len(trees))

    def run(i: int) -> tuple[Path, Path]:
        tree = trees[i]
        data, seconds = out / f"coverage.{i}", out / f"seconds.{i}.json"
        env = run_env(tree) | {"MUTANT_DURATIONS_OUT": str(seconds)}
        include = ",".join(str(tree / t) for t in targets)
        cmd = [sys.executable, "-m", "coverage", "run", f"--data-file={data}", f"--include={include}",
               "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tools.mutant_plugin", *buckets[i]]
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
        tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
        print(f"coverage map [{i + 1}/{len(trees)}]: {len(buckets[i])} files, {tail[0]}", flush=True)
        return data, seconds

    with concurrent.futures.ThreadPoolExecutor(len(trees)) as pool:
        outputs = list(pool.map(run, range(len(trees))))
    mapping = CoverageMap()
    for i, (data_file, seconds) in enumerate(outputs):
        if seconds.exists():
            mapping.seconds.update(orjson.loads(seconds.read_bytes()))
        if not data_file.exists():
            continue
        data = coverage.CoverageData(basename=str(data_file))
        data.read()
        for measured in data.measured_files():
            rel = str(Path(measured).resolve().relative_to(trees[i].resolve()))
            for line, contexts in data.contexts_by_lineno(measured).items():
                mapping.lines[rel][line].update(c for c in contexts if c)
    return mapping


def _functions_naming(source: str, names: set[str]) -> list[tuple[int, int]]:
    """The line ranges of the functions whose body names one of ``names``."""
    ranges = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            used |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if used & names:
                ranges.append((node.lineno, node.end_lineno))
    return ranges


def _module_level_names(source: str, line: int) -> set[str]:
    """The names a module-level statement spanning ``line`` defines (an assignment's targets; a
    class or function, its decorators included)."""
    for node in ast.parse(source).body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        if first <= line <= (node.end_lineno or node.lineno):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                return {node.name}
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])
            return {t.id for t in targets if isinstance(t, ast.Name)}
    return set()


def _statement_lines(source: str, line: int) -> list[int]:
    """The lines of the innermost statement on ``line`` (a compound one's header only)."""
    enclosing = [node for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)]
    best = max(enclosing, key=lambda n: (n.lineno, -(n.end_lineno or n.lineno)), default=None)
    if best is None:
        return [line]
    body = getattr(best, "body", None)
    last = body[0].lineno - 1 if isinstance(body, list) and body and body[0].lineno > best.lineno \
        else (best.end_lineno or best.lineno)
    return list(range(best.lineno, max(last, line) + 1))


def tests_for(m: Mutant, source: str, mapping: CoverageMap) -> list[str]:
    """The tests that execute the mutated line, by the rules in the module's docstring."""
    if "/queries/" in m.file:
        query = query_at(source, m.start)
        tests: set[str] = set()
        for f in SQL_CALLERS if query is not None else ():
            spans = _functions_naming((ROOT / f).read_text(), {query or ""})
            tests |= mapping.tests_of(f, [n for a, b in spans for n in range(a, b + 1)])
    elif m.file.endswith(".sql"):
        tests = {t for t in mapping.seconds if t.startswith(MIGRATION_TESTS)}
    else:
        # Every line of the statement: coverage records a continuation line only when it runs
        # (``a or (b and c)`` on two lines: the second not when ``a`` is true), and a test that
        # stops at the first line may be the one that tells the mutant apart.
        tests = mapping.tests_of(m.file, _statement_lines(source, m.line))
        if not tests:
            names = _module_level_names(source, m.line)
            if names:
                ranges = _functions_naming(source, names)
                users = [n for a, b in ranges for n in range(a, b + 1)]
                tests = mapping.tests_of(m.file, users)
                if not tests and m.file.startswith(LIB):  # named by another module of the library
                    tests = {t for f in mapping.lines for t in mapping.tests_of(
                        f, [n for a, b in _functions_naming((ROOT / f).read_text(), names)
                            for n in range(a, b + 1)])}
    return sorted(tests, key=lambda t: (mapping.seconds.get(t, 1.0), t))


def sample(tests: list[str], limit: int) -> list[str]:
    """At most ``limit`` tests, round-robin across their files (each file's fastest first)."""
    if len(tests) <= limit:
        return tests
    by_file: dict[str, list[str]] = defaultdict(list)
    for t in tests:
        by_file[t.split("::", 1)[0]].append(t)
    chosen: list[str] = []
    queues = list(by_file.values())
    while len(chosen) < limit:
        for q in queues:
            if q and len(chosen) < limit:
                chosen.append(q.pop(0))
    return chosen


# -- running ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed | killed (timeout) | incompetent | survived | not covered
    tests: int  # how many tests ran (were selected)
    covering: int  # how many tests execute the line
    seconds: float
    detail: str = ""
    diff: str = ""
    file_sha: str = ""  # the mutated file's content when it ran: a resumed run keeps it only if unchanged


def _diff(m: Mutant, pristine: str, mutated: str) -> str:
    before, after = pristine.splitlines(), mutated.splitlines()
    first = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
                 min(len(before), len(after)))
    last_b, last_a = len(before), len(after)
    while last_b > first and last_a > first and before[last_b - 1] == after[last_a - 1]:
        last_b, last_a = last_b - 1, last_a - 1
    removed = [f"- {line.strip()}" for line in before[first:last_b]][:6]
    added = [f"+ {line.strip()}" for line in after[first:last_a]][:6]
    return "\n".join(removed + added)


def _imports(tree: Path, file: str, mutated: str) -> bool:
    """Whether ``file`` with ``mutated`` as its text still imports (the tree is restored after)."""
    with mutated_file(tree / file, mutated):
        done = subprocess.run([sys.executable, "-c", f"import {module_of(tree, file)}"], cwd=tree,
                              env=run_env(tree), capture_output=True, timeout=120)
    return done.returncode == 0


def run_mutant(tree: Path, m: Mutant, tests: list[str], covering: int, timeout_s: float) -> Outcome:
    target = tree / m.file
    pristine = target.read_text()
    try:
        mutated = m.apply(pristine)
    except Exception as exc:  # an operator that cannot handle this node (cosmic-ray's own bug)
        return Outcome(m, "incompetent", 0, covering, 0.0, f"the operator failed here: {exc!r}"[:200])
    if mutated is None or mutated == pristine:
        return Outcome(m, "incompetent", 0, covering, 0.0, "the operator made no change here")
    diff = _diff(m, pristine, mutated)
    if not tests:
        # A line no test's context executes runs at import (a module constant, a type alias):
        # a mutant there that breaks the import is caught by every test, not a survivor.
        if m.kind == "python" and not _imports(tree, m.file, mutated):
            return Outcome(m, "incompetent", 0, 0, 0.0, "the mutated module fails at import", diff)
        return Outcome(m, "not covered", 0, 0, 0.0, "no test of the suites executes this line", diff)
    order = tree / ".mutant-order"
    order.write_text("\n".join(tests))
    env = run_env(tree) | {"MUTANT_ORDER": str(order)}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "tools.mutant_plugin",
           "-rfE", *tests]
    start = time.monotonic()
    with mutated_file(target, mutated):
        try:
            done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            code, output = -1, ""
    took = time.monotonic() - start
    if code == 0:
        return Outcome(m, "survived", len(tests), covering, took, "", diff)
    if code == 1:
        failed = next((line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
        return Outcome(m, "killed", len(tests), covering, took, failed[:200], diff)
    if code == -1:
        return Outcome(m, "killed (timeout)", len(tests), covering, took, f"stopped after {timeout_s:.0f} s",
                       diff)
    tail = " | ".join(output.strip().splitlines()[-2:])
    return Outcome(m, "incompetent", len(tests), covering, took, f"pytest exit {code}: {tail[:200]}", diff)


# -- judging and reporting -------------------------------------------------------------------------


def judged(o: Outcome) -> Judged | None:
    """The judgement that covers this survivor: same file, same removed and added lines (and for
    a judgement naming one, the same named query)."""
    for j in JUDGED:
        if j.file == o.mutant.file and j.diff.strip() == o.diff.strip() and (
                j.query is None or j.query == query_at((ROOT / j.file).read_text(), o.mutant.start)):
            return j
    return None


def report(outcomes: list[Outcome], not_run: int) -> int:
    modules: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for o in outcomes:
        modules[o.mutant.file][o.status] += 1
    statuses = ("killed", "killed (timeout)", "incompetent", "survived", "not covered")
    width = max(len(f) for f in modules) if modules else 10
    print(f"\n{'module':<{width}}  " + "  ".join(f"{s:>16}" for s in statuses))
    for file in sorted(modules):
        print(f"{file:<{width}}  " + "  ".join(f"{modules[file][s]:>16}" for s in statuses))
    totals = {s: sum(m[s] for m in modules.values()) for s in statuses}
    print(f"{'all':<{width}}  " + "  ".join(f"{totals[s]:>16}" for s in statuses))
    unexplained = 0
    lived = [o for o in outcomes if o.status in ("survived", "not covered")]
    explained = [(o, judged(o)) for o in lived]
    for o, j in sorted(explained, key=lambda oj: (oj[0].mutant.file, oj[0].mutant.line)):
        verdict = f"judged {j.verdict}: {j.why}" if j else "UNEXPLAINED"
        unexplained += j is None
        print(f"\n{o.mutant.file}:{o.mutant.line} {o.mutant.operator} [{o.status}; "
              f"{o.tests} of {o.covering} covering tests] -- {verdict}\n{o.diff}")
    print(f"\n{len(outcomes)} mutants run, {not_run} not run (time box); {len(lived)} lived, "
          f"{len(lived) - unexplained} judged, {unexplained} unexplained")
    return 0 if unexplained == 0 and not_run == 0 else 1


def read_report(path: Path) -> dict[str, Outcome]:
    done: dict[str, Outcome] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            raw = orjson.loads(line)
            o = Outcome(**{**raw, "mutant": Mutant(**raw["mutant"])})
            done[o.mutant.id] = o
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutate_generated",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", default=[], metavar="PATH",
                        help="only this file's mutants (repeatable; a migration, or the migrations folder)")
    parser.add_argument("--workers", type=int, default=2, help="parallel copies of the tree (default 2)")
    parser.add_argument("--budget-min", type=float, default=0.0, help="stop starting mutants after this long")
    parser.add_argument("--max-tests", type=int, default=60, help="tests run per mutant at most (default 60)")
    parser.add_argument("--confirm-tests", type=int, default=1000,
                        help="tests a sample's survivor runs again before it counts (default 1000: all)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="one mutant's test run at most")
    parser.add_argument("--report", type=Path, default=ROOT / ".mutants" / "generated.jsonl",
                        help="results, one JSON line per mutant (default .mutants/generated.jsonl)")
    parser.add_argument("--resume", action="store_true", help="keep the report's results, run the rest")
    parser.add_argument("--suites", nargs="+", default=list(SUITES), metavar="PATH",
                        help="the test files or folders whose tests may kill a mutant (default: SUITES)")
    parser.add_argument("--skip", type=int, default=0, metavar="N",
                        help="leave out the first N mutants of the listing (a sitting whose report is lost)")
    parser.add_argument("--list", action="store_true",
                        help="count the mutants per module and operator, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    args = parser.parse_args(argv)

    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="paycore-mutants-"))
    trees = [tmp / f"tree{i}" for i in range(max(1, args.workers))]
    try:
        for tree in trees:
            copy_tree(ROOT, tree)
        mutants = all_mutants(trees[0], args.module)
        mutants = mutants[args.skip:]  # the listing's order is fixed: by operator, then occurrence
        if args.list:
            counts: dict[tuple[str, str], int] = defaultdict(int)
            for m in mutants:
                counts[(m.file, m.operator.removeprefix("core/"))] += 1
            for (file, op), n in sorted(counts.items()):
                print(f"{n:5}  {file}  {op}")
            print(f"{len(mutants)} mutants")
            return 0
        env = run_env(trees[0])
        files = sorted({m.file for m in mutants if m.file.endswith(".py")})
        check_imports_come_from(trees[0], env, [module_of(trees[0], f) for f in files])
        args.report.parent.mkdir(parents=True, exist_ok=True)
        done = read_report(args.report) if args.resume else {}
        if not args.resume:
            args.report.write_text("")
        file_shas = {f: hashlib.sha1((trees[0] / f).read_bytes()).hexdigest()
                     for f in {m.file for m in mutants}}
        # A result for a file that changed since is about other code: run its mutants again.
        done = {k: o for k, o in done.items() if file_shas.get(o.mutant.file) == o.file_sha}
        # A survivor of the first sample only is run again (with the wider one, above).
        done = {k: o for k, o in done.items()
                if not (o.status == "survived" and o.tests < min(o.covering, args.confirm_tests))}
        todo = [m for m in mutants if m.id not in done]
        print(f"mutate-generated: {len(mutants)} mutants ({len(done)} already run), {len(trees)} workers",
              flush=True)
        saved = args.report.with_suffix(".coverage.json")
        if args.resume and saved.exists():  # the map of the interrupted run (delete it to map again)
            mapping = CoverageMap.load(saved)
        else:
            covered = {m.file for m in mutants if m.file.endswith(".py")}
            if any("/queries/" in m.file for m in mutants):
                covered |= set(SQL_CALLERS)
            mapping = map_coverage(trees, sorted(covered), args.suites, tmp)
            mapping.save(saved)
        print(f"coverage map: {len(mapping.seconds)} tests in {time.monotonic() - started:.0f} s", flush=True)

        sources = {f: (trees[0] / f).read_text() for f in {m.file for m in todo}}
        queue: Iterator[Mutant] = iter(todo)
        lock = threading.Lock()
        outcomes = list(done.values())
        not_run = 0

        def worker(tree: Path) -> None:
            nonlocal not_run
            while True:
                with lock:
                    m = next(queue, None)
                    if m is None:
                        return
                    if args.budget_min and time.monotonic() - started > args.budget_min * 60:
                        not_run += 1
                        continue
                covering = tests_for(m, sources[m.file], mapping)
                outcome = run_mutant(tree, m, sample(covering, args.max_tests), len(covering), args.timeout_s)
                if outcome.status == "survived" and outcome.tests < len(covering):
                    # The sample may have missed it: a wider one (each file's fastest in turn) before
                    # calling it a survivor; the report says how many of the covering tests ran.
                    outcome = run_mutant(tree, m, sample(covering, args.confirm_tests), len(covering),
                                         args.timeout_s)
                outcome.file_sha = file_shas[m.file]
                with lock:
                    outcomes.append(outcome)
                    with args.report.open("ab") as fh:
                        fh.write(orjson.dumps(asdict(outcome)) + b"\n")
                    n = len(outcomes)
                    print(f"[{n:>4}/{len(mutants)}] {m.file}:{m.line} {m.operator.removeprefix('core/')}: "
                          f"{outcome.status} ({outcome.tests} tests, {outcome.seconds:.0f} s)", flush=True)

        with concurrent.futures.ThreadPoolExecutor(len(trees)) as pool:
            for f in [pool.submit(worker, tree) for tree in trees]:
                f.result()
    finally:
        if args.keep:
            print(f"mutate-generated: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nmutate-generated: {(time.monotonic() - started) / 60:.1f} min")
    return report(outcomes, not_run)


if __name__ == "__main__":
    sys.exit(main())
