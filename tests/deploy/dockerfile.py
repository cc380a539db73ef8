"""A small Dockerfile reader and the rules the production image keeps.

No container engine exists where the tests run, so the image is checked from its recipe:
:func:`parse` reads ``deploy/Dockerfile`` into stages of instructions, :func:`problems` says
which rule the recipe breaks, and :class:`DockerIgnore` answers what the build context
leaves out, with Docker's own matching (patterns from the context root, ``**`` for any depth,
``!`` to re-include, the last matching line wins, a directory's match covers its content).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The image's venv and the only lock that may be installed into it.
VENV = "/opt/venv"
RUNTIME_LOCK = "requirements/runtime.lock"
BUILD_LOCK = "requirements/build.lock"
# What the build context must leave out whatever else changes: local state and virtualenvs.
MUST_IGNORE = (".venv", ".paycore", ".git", "tests", "devstack", "requirements/dev.lock",
               "libs/paycore/paycore/__pycache__/cli.cpython-311.pyc")
# The build argument naming the base both stages use.
BASE_ARG = "BASE"
# What makes every service listen on all interfaces in the image (cli/paycore_cli/common.py).
LISTEN_ALL = ("PAYCORE_HOST", "PAYCORE_METRICS_HOST")
LABELS = ("org.opencontainers.image.title", "org.opencontainers.image.description",
          "org.opencontainers.image.version", "org.opencontainers.image.revision")
# A tag naming an exact release (3.11.7-slim-bookworm), optionally with a digest; or a digest.
_DIGEST = r"@sha256:[0-9a-f]{64}"
_PINNED = re.compile(rf"^[\w./-]+(:\d+\.\d+\.\d+[\w.-]*({_DIGEST})?|(:[\w.-]+)?{_DIGEST})$")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    image: str  # with the build arguments' defaults substituted
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)
    from_args: str = ""  # as written after FROM (``${BASE}``)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def instructions(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comment lines dropped, as Docker does."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # a comment line inside a continuation is dropped too
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(pending).partition(" ")
        found.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    if pending:
        raise ValueError("the Dockerfile ends inside a continuation line")
    return found


def global_args(text: str) -> dict[str, str]:
    """The build arguments declared before the first FROM, with their defaults (``ARG BASE=...``)."""
    found: dict[str, str] = {}
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, _, default = instruction.args.partition("=")
            found[name.strip()] = default.strip()
    return found


def parse(text: str) -> list[Stage]:
    """The stages, each FROM's image with the global build arguments' defaults substituted."""
    stages: list[Stage] = []
    args = global_args(text)

    def substitute(image: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)

    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            words = [w for w in instruction.args.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(substitute(words[0]), name, from_args=words[0]))
        elif stages:
            stages[-1].instructions.append(instruction)
    return stages


def exec_form(args: str) -> list[str] | None:
    """The argument list of an exec-form (JSON array) instruction, else None."""
    if not args.startswith("["):
        return None
    value = json.loads(args)
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # the legacy `ENV KEY value` form
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


def copy_parts(args: str) -> tuple[dict[str, str], list[str], str]:
    """A COPY's flags (``--from=x``), sources and destination."""
    words = exec_form(args) or shlex.split(args)
    flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
    paths = [w for w in words if not w.startswith("--")]
    return flags, paths[:-1], paths[-1]


def _split_commands(run: str) -> list[list[str]]:
    return [shlex.split(part) for part in re.split(r"&&|;|\|\|", run)]


def pip_commands(run: str) -> list[list[str]]:
    """Each ``pip`` command of a RUN, as words (``/opt/build/bin/pip --python X install ...``)."""
    return [words for words in _split_commands(run)
            if words and (words[0].endswith("/pip") or words[0] == "pip"
                          or words[:3] in (["python", "-m", "pip"], ["python3", "-m", "pip"]))]


def venv_commands(run: str) -> list[list[str]]:
    """Each ``python -m venv ...`` of a RUN, as words."""
    return [words for words in _split_commands(run) if words[1:3] == ["-m", "venv"]]


def _action_index(words: Sequence[str]) -> int:
    """Where ``install``/``wheel`` stands: after ``pip`` (or ``python -m pip``) and its
    ``--python X``."""
    i = 1 if words[0].endswith("pip") else 3
    while i < len(words) and words[i].startswith("--python"):
        i += 1 if "=" in words[i] else 2
    return i


def pip_venv(words: Sequence[str]) -> str:
    """The venv a pip command installs into: ``--python``'s, else the pip's own."""
    python = _option_values(words[:_action_index(words)], "--python")
    program = python[-1] if python else words[0]
    return str(Path(program).parent.parent)


def _option_values(words: Sequence[str], *names: str) -> list[str]:
    values = []
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                values.append(words[i + 1])
            elif word.startswith(name + "="):
                values.append(word.split("=", 1)[1])
    return values


def pip_targets(words: Sequence[str]) -> list[str]:
    """The positional arguments of a pip install/wheel (paths or names), options skipped."""
    takes_value = {"-r", "--requirement", "-c", "--constraint", "-w", "--wheel-dir", "--target",
                   "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--prefix"}
    targets, skip = [], False
    for word in words[_action_index(words) + 1:]:
        if skip:
            skip = False
        elif word in takes_value:
            skip = True
        elif not word.startswith("-"):
            targets.append(word)
    return targets


class DockerIgnore:
    """What a ``.dockerignore`` leaves out of the build context."""

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[re.Pattern[str], bool]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            pattern = line[1:].strip() if include else line
            pattern = re.sub(r"/+", "/", pattern).strip("/")
            self.rules.append((re.compile(_pattern_regex(pattern)), include))

    def excludes(self, path: str) -> bool:
        """Whether ``path`` (relative to the context root) is left out of the context."""
        path = path.strip("/")
        parents = [path] + [str(p) for p in Path(path).parents if str(p) != "."]
        excluded = False
        for regex, include in self.rules:
            if any(regex.fullmatch(p) for p in parents):
                excluded = not include
        return excluded


def _pattern_regex(pattern: str) -> str:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def problems(dockerfile: str, dockerignore: str, root: Path, packages: Iterable[str]) -> list[str]:
    """Every rule of the production image that ``dockerfile`` breaks; empty when it keeps them."""
    found: list[str] = []
    stages = parse(dockerfile)
    ignore = DockerIgnore(dockerignore)
    if len(stages) < 2:
        return [f"a multi-stage build needs a builder and a final stage; found {len(stages)} stage(s)"]
    names = {s.name for s in stages if s.name}
    bases = {s.image for s in stages if s.image not in names}
    for stage in stages:
        if stage.image not in names and stage.from_args.strip("${}") not in global_args(dockerfile):
            found.append(f"FROM {stage.from_args}: the base must be a build argument (ARG {BASE_ARG}=...)")
    for stage in stages:
        if stage.image not in names and not _PINNED.match(stage.image):
            found.append(f"FROM {stage.image} is not pinned to an exact version")
    if len(bases) != 1:
        found.append(f"the stages should share one base (the venv links its interpreter): {sorted(bases)}")
    final = stages[-1]
    found += _final_stage_problems(final, builders=names - {final.name})
    found += _install_problems(stages, packages)
    for stage in stages:
        for copy in stage.all("COPY") + stage.all("ADD"):
            flags, sources, _ = copy_parts(copy.args)
            if "from" in flags:
                continue
            for source in sources:
                if not (root / source).exists():
                    found.append(f"line {copy.line}: COPY {source}: no such file in the build context")
                elif ignore.excludes(source):
                    found.append(f"line {copy.line}: COPY {source}: excluded by .dockerignore")
    for path in MUST_IGNORE:
        if not ignore.excludes(path):
            found.append(f".dockerignore does not exclude {path}")
    return found


def _final_stage_problems(final: Stage, builders: set[str]) -> list[str]:
    found = []
    users = final.all("USER")
    user = users[-1].args.split(":")[0] if users else None
    if user is None:
        found.append("the final stage sets no USER: the services would run as root")
    elif user in ("root", "0"):
        found.append(f"the final stage runs as {users[-1].args}: it must not be root")
    checks = final.all("HEALTHCHECK")
    command = exec_form(checks[-1].args.partition("CMD")[2].strip()) if checks else None
    if command != ["paycore", "health"]:
        found.append('the final stage needs HEALTHCHECK ... CMD ["paycore", "health"]')
    entry = final.all("ENTRYPOINT")
    if not entry or exec_form(entry[-1].args) != ["paycore"]:
        found.append('the final stage needs ENTRYPOINT ["paycore"]')
    if not any("8000" in e.args.split() for e in final.all("EXPOSE")):
        found.append("the final stage does not EXPOSE 8000")
    env: dict[str, str] = {}
    for instruction in final.all("ENV"):
        env.update(env_pairs(instruction.args))
    if not env.get("PATH", "").startswith(f"{VENV}/bin"):
        found.append(f"PATH in the final stage must start with {VENV}/bin")
    if env.get("PYTHONDONTWRITEBYTECODE") != "1":
        found.append("the final stage must set PYTHONDONTWRITEBYTECODE=1")
    for name in LISTEN_ALL:
        if env.get(name) != "0.0.0.0":
            found.append(f"the final stage must set {name}=0.0.0.0: in a container every service "
                         "listens on all interfaces")
    labels: dict[str, str] = {}
    for instruction in final.all("LABEL"):
        labels.update(env_pairs(instruction.args))
    found += [f"the final stage has no LABEL {label}" for label in LABELS if label not in labels]
    for copy in final.all("COPY") + final.all("ADD"):
        flags, sources, _ = copy_parts(copy.args)
        if copy.keyword != "COPY" or flags.get("from") not in builders or sources != [VENV]:
            found.append(f"line {copy.line}: the final stage may copy only {VENV} from the builder")
    for run in final.all("RUN"):
        if pip_commands(run.args):
            found.append(f"line {run.line}: the final stage installs nothing; the builder does")
    return found


def _install_problems(stages: Sequence[Stage], packages: Iterable[str]) -> list[str]:
    found = []
    into_venv: set[str] = set()
    built: set[str] = set()
    made = [words for stage in stages for run in stage.all("RUN") for words in venv_commands(run.args)
            if words[-1].rstrip("/") == VENV]
    if not made:
        found.append(f"no RUN makes {VENV} with python -m venv")
    elif any("--without-pip" not in words for words in made):
        found.append(f"{VENV} must be made --without-pip: no pip or setuptools in the runtime image")
    for stage in stages:
        for run in stage.all("RUN"):
            if "dev.lock" in run.args or "dev.in" in run.args:
                found.append(f"line {run.line}: the image must not install the dev lock")
            for words in pip_commands(run.args):
                action = words[_action_index(words)]
                locks = _option_values(words, "-r", "--requirement")
                targets = pip_targets(words)
                if action not in ("install", "wheel"):
                    continue
                if locks and "--require-hashes" not in words:
                    found.append(f"line {run.line}: pip {action} -r {' '.join(locks)} "
                                 "without --require-hashes")
                if not locks and not ({"--no-deps", "--no-index"} <= set(words)):
                    found.append(f"line {run.line}: pip {action} {' '.join(targets)} must use --no-deps "
                                 "--no-index: only the hashed lock brings third-party code")
                if words[0] == f"{VENV}/bin/pip":
                    found.append(f"line {run.line}: {VENV} has no pip: install into it with the build "
                                 f"venv's pip --python {VENV}/bin/python")
                if pip_venv(words) == VENV and action == "install":
                    into_venv.update(locks)
                elif locks and set(locks) != {BUILD_LOCK}:
                    found.append(f"line {run.line}: only {BUILD_LOCK} goes into a build venv")
                if action == "wheel":
                    built.update(t.removeprefix("./").rstrip("/") for t in targets)
    if into_venv != {RUNTIME_LOCK}:
        found.append(f"{VENV} must be installed from {RUNTIME_LOCK} alone; it gets {sorted(into_venv)}")
    wanted = set(packages)
    if built != wanted:
        found.append(f"the builder builds {sorted(built)}; the runtime packages are {sorted(wanted)}")
    return found
