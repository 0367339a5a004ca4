"""Every Python example in README.md and docs/ runs, as written, so that none can drift.

The examples are collected from the Markdown: each fenced ``python`` block is one test, run in a
fresh interpreter (examples declare their events in the default registry, as an application
does, and two pages may both declare ``order.paid``), from an empty directory (a SQLite file an
example makes lands there). The interpreter is the one of ``.venv-all`` when ``make test`` has
built it: every extra, no dev tool, so an example that needs a dev tool (httpx, trio) fails
here as it would for a user who installed ``eventbus[all]``; the working tree's code comes
first on ``sys.path``. Every block runs as a script, as a reader who saves it to a file runs
it: its async part is in an ``async def main()`` run by ``anyio.run(main)``, and a top-level
``await`` or ``async with`` (which only ``python -m asyncio`` takes) fails. A traceback points
at the Markdown file's own lines.

HTML comments right before a block (invisible on GitHub and in the site) say how to run it:

``<!-- example: skip: REASON -->``
    not runnable on purpose (a fragment of a bigger program, a sketch of a signature); the
    reason is required. Used sparingly.
``<!-- example: continues -->``
    runs after the page's previous Python block, in the same interpreter: the text between
    them explains one program in steps.
``<!-- example: redis -->``, ``<!-- example: postgres -->``
    needs a server: the suite's throwaway one, at ``$REDIS_URL`` / ``$DATABASE_URL`` (an
    asyncpg URL), as an application reads its own. ``$CONSOLE_TOKEN`` is always set (a fresh
    random token), for the console's examples.
``<!-- example: output -->``
    what it prints must be the ``text`` block that follows it.
``<!-- example: pytest -->``
    the block is a test module; pytest runs it in a fresh process, with anyio's plugin in
    auto mode and ours loaded by its entry point, as in a user's project; every test passes.

Several words go in one comment, comma-separated: ``<!-- example: continues, redis -->``.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
KNOWN = {"skip", "continues", "redis", "postgres", "output", "pytest"}
DIRECTIVE = re.compile(r"<!--\s*example:\s*(?P<words>.*?)\s*-->")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)")
TIMEOUT = 120
ALL_EXTRAS = ROOT / ".venv-all" / "bin" / "python"
PYTHON = str(ALL_EXTRAS) if ALL_EXTRAS.exists() else sys.executable

# Runs one example: the Markdown file's name and the code padded to its own line numbers, so
# that a traceback names the page and the line.
RUNNER = """
import sys
name, path = sys.argv[1], sys.argv[2]
exec(compile(open(path).read(), name, "exec"), {"__name__": "__main__"})
"""

PYTEST_CONFIG = """\
[tool.pytest.ini_options]
anyio_mode = "auto"
addopts = ["--strict-markers"]
filterwarnings = ["error"]
"""


@dataclass(frozen=True)
class Example:
    """One fenced ``python`` block of a page."""

    page: Path
    line: int  # of the first line of code, 1-based
    code: str
    words: frozenset[str]
    reason: str  # why it is skipped, for "skip"
    output: str | None  # the text block after it, for "output"
    previous: Example | None  # the page's previous Python block

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def chain(self) -> list[Example]:
        """This block, after the blocks it continues (first block first)."""
        if "continues" not in self.words:
            return [self]
        if self.previous is None:
            raise ValueError(f"{self.name} continues, but no Python block comes before it")
        return [*self.previous.chain(), self]

    def needs(self) -> set[str]:
        return {w for e in self.chain() for w in e.words} & {"redis", "postgres"}

    def source(self) -> str:
        """The chain's code, each block on the page's own line numbers."""
        out: list[str] = []
        for example in self.chain():
            out += [""] * (example.line - 1 - len(out))
            out += example.code.splitlines()
        return "\n".join(out) + "\n"


def _directive(lines: list[str], fence: int) -> tuple[frozenset[str], str]:
    """The words (and a skip's reason) of the comment lines right before line *fence*."""
    words: set[str] = set()
    reason = ""
    i = fence - 1
    while i >= 0 and (not lines[i].strip() or lines[i].lstrip().startswith("<!--")):
        if match := DIRECTIVE.search(lines[i]):
            for word in match["words"].split(","):
                key, _, why = word.strip().partition(":")
                words.add(key.strip())
                reason = why.strip() or reason
        i -= 1
    return frozenset(words), reason


def _blocks(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """Each fenced block: (line of its fence, index after its closing fence, language, code)."""
    found = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent = len(match["indent"])
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [line[indent:] for line in lines[i + 1 : end]]
        found.append((i, end + 1, match["lang"], "\n".join(body) + "\n"))
        i = end + 1
    return found


def collect(page: Path) -> list[Example]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks = _blocks(lines)
    examples: list[Example] = []
    for n, (fence, _, lang, code) in enumerate(blocks):
        if lang != "python":
            continue
        words, reason = _directive(lines, fence)
        output = None
        if "output" in words:
            after = [(lg, c) for _, _, lg, c in blocks[n + 1 :]]
            if not after or after[0][0] != "text":
                raise ValueError(f"{page.name}:{fence + 2} says output, but no text block follows")
            output = after[0][1]
        previous = examples[-1] if examples else None
        examples.append(Example(page, fence + 2, code, words, reason, output, previous))
    return examples


EXAMPLES = [example for page in PAGES for example in collect(page)]


def test_the_examples_are_collected_from_every_page_and_every_directive_is_known() -> None:
    pages = {e.page.name for e in EXAMPLES}
    assert {"README.md", "getting-started.md", "semantics.md", "scheduler.md"} <= pages
    for example in EXAMPLES:
        assert example.words <= KNOWN, f"{example.name}: unknown {sorted(example.words - KNOWN)}"
        if "skip" in example.words:
            assert example.reason, f"{example.name}: a skipped example must say why"
            assert example.words == {"skip"}, f"{example.name}: skip takes no other word"
        example.chain()  # a "continues" with nothing before it raises


def test_every_example_is_a_script_as_printed() -> None:
    """Regression test: six examples had a top-level ``await`` or ``async with``: pasted into
    a file they were a SyntaxError, and one failed in ``python -m asyncio`` too."""
    not_scripts = []
    for example in EXAMPLES:
        if example.words & {"skip", "pytest"}:
            continue
        try:
            compile(example.source(), example.name, "exec")
        except SyntaxError as exc:
            not_scripts.append(f"{example.name}: {exc.msg} (line {exc.lineno})")
    assert not_scripts == [], "wrap the async part in async def main(); anyio.run(main)"


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, cwd=cwd, env=env, timeout=TIMEOUT, check=False
    )


@pytest.mark.parametrize(
    "example",
    [
        pytest.param(
            e,
            id=e.name,
            marks=[pytest.mark.skip(reason=e.reason)] if "skip" in e.words else [],
        )
        for e in EXAMPLES
    ],
)
def test_example_runs(example: Example, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "EVENTBUS_"))}
    env["PYTHONPATH"] = str(ROOT)  # domain/ runs from the repository, as make demo runs it
    env["CONSOLE_TOKEN"] = secrets.token_urlsafe(24)
    needs = example.needs()
    if "redis" in needs:
        env["REDIS_URL"] = request.getfixturevalue("redis_url")
    if "postgres" in needs:
        env["DATABASE_URL"] = request.getfixturevalue("postgres_url")
    if "pytest" in example.words:
        (tmp_path / "pyproject.toml").write_text(PYTEST_CONFIG)
        (tmp_path / "test_example.py").write_text(example.code)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]  # a dev tool
        done = _run([*command, "-p", "no:hypothesispytest", "test_example.py"], tmp_path, env)
        tests = len(re.findall(r"^(?:async )?def test_", example.code, re.M))
        passed = re.search(r"(\d+) passed", done.stdout)
        if done.returncode != 0 or passed is None or int(passed[1]) < tests:
            pytest.fail(f"{example.name}: pytest said\n{done.stdout}{done.stderr}", pytrace=False)
        return
    script = tmp_path / "example.py"
    script.write_text(example.source())
    done = _run([PYTHON, "-c", RUNNER, str(example.page), str(script)], tmp_path, env)
    if done.returncode != 0:
        pytest.fail(f"{example.name} exited {done.returncode}:\n{done.stderr}", pytrace=False)
    if example.output is not None and done.stdout != example.output:
        pytest.fail(f"{example.name} printed\n{done.stdout}\nnot\n{example.output}", pytrace=False)
