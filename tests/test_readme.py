"""README.md's "Try it" runs as written, against a real ``paycore up`` on free ports.

The block between ``<!-- try-it:begin -->`` and ``<!-- try-it:end -->`` is run by
bash from a directory laid out like a clone (``.venv`` there, ``.paycore`` made by
``up`` there), with only checkout's port changed from the README's ``localhost:8000``.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.up import BANNER_END, running_up, up_env

ROOT = Path(__file__).resolve().parent.parent
README_CHECKOUT = "localhost:8000"


def try_it_block(name: str = "try-it") -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(begin) == 1 and text.count(end) == 1, f"README.md marks its {name} block once"
    section = text.split(begin, 1)[1].split(end, 1)[0]
    match = re.fullmatch(r"\s*```sh\n(.*?)```\s*", section, re.DOTALL)
    assert match, "the Try-it markers enclose exactly one ```sh block"
    return match.group(1)


@pytest.mark.parametrize(("block_name", "env"), [
    ("try-it", {}),
    ("try-it-stripe", {"PAYCORE_DEFAULT_PROVIDER": "stripe"}),  # `PAYCORE_DEFAULT_PROVIDER=stripe make run`
])
async def test_readme_try_it_runs_as_written(tmp_path: Path, db_dsn: str, block_name: str,
                                             env: dict[str, str]) -> None:
    block = try_it_block(block_name)
    assert README_CHECKOUT in block
    project = tmp_path / "clone"
    project.mkdir()
    (project / ".venv").symlink_to(Path(sys.prefix))  # `.venv/bin/paycore` as in a clone after `make run`

    # `make run` in the project directory: no PAYCORE_HOME, so `up` keeps its state in ./.paycore.
    async with running_up(project, {**up_env(database_url=db_dsn), **env}) as up:
        await up.wait_for(BANNER_END)
        assert (project / ".paycore" / "jwt_secret").exists()
        script = block.replace(README_CHECKOUT, f"localhost:{up.ports['checkout']}")
        shell_env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
        result = await asyncio.to_thread(
            subprocess.run, ["bash", "-euo", "pipefail", "-c", script], cwd=project, env=shell_env,
            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{up.output()}"
    # try-it ends with the status GET; try-it-stripe with two payments, one per provider.
    answers = [line.replace(" ", "") for line in result.stdout.strip().splitlines() if line.startswith("{")]
    expected = 1 if block_name == "try-it" else 2
    assert len(answers) >= expected, result.stdout
    assert all('"state":"Succeeded"' in a for a in answers[-expected:]), f"{result.stdout}\n{up.output()}"


# Paths to documents, as the docs and docstrings write them: `docs/x.md`, ``docs/x.md``, [..](x.md).
DOC_REFERENCE = re.compile(r"(?:`+|\]\()([\w./-]+\.(?:md|txt))(?:`+|\))")


def _documents() -> list[Path]:
    found = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "services").glob("*/README.md")]
    for package in (ROOT / "libs", ROOT / "services"):
        found += package.rglob("*.py")
    return [p for p in found if ".venv" not in p.parts]


def test_every_document_a_doc_or_docstring_names_is_in_the_repository() -> None:
    """A clone has only this repository: no reference may point outside it (e.g. ``../shared/``)."""
    missing = []
    for path in _documents():
        for ref in DOC_REFERENCE.findall(path.read_text(encoding="utf-8")):
            # Written relative to the project root (the convention) or, for links, to the file.
            if not (ROOT / ref).is_file() and not (path.parent / ref).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
    assert missing == []
