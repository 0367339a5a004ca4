"""The ``eventbus failures`` session on docs/failures.md, replayed command by command.

The page shows ``shop.py`` and then a terminal session against it; a reader types the same
commands. Here ``shop.py`` is the page's own block, each ``$`` line runs in a shell in an empty
directory, and what it prints must be what the page prints, up to what differs between runs:
ids, times, and the traceback's frames (paths and line numbers of the installed package).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.test_docs_examples import ROOT, _blocks, collect

PAGE = ROOT / "docs" / "failures.md"
HEX_ID = re.compile(r"\b[0-9a-f]{12}(?:[0-9a-f]{20})?\b")
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?")
FRAME = re.compile(r"^ {4}\S.*$|^ {6,}\S.*$", re.MULTILINE)  # a frame and its code in a traceback


def _session() -> tuple[str, list[tuple[str, str]]]:
    """``shop.py`` (the Python block right before the session) and the session's commands,
    each with the output the page shows."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    blocks = _blocks(lines)
    [i] = [n for n, (_, _, lang, code) in enumerate(blocks) if lang == "console"]
    fence = blocks[i - 1][0]
    [shop] = [e.code for e in collect(PAGE) if e.line == fence + 2]
    steps: list[tuple[str, str]] = []
    for line in blocks[i][3].splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], ""))
        else:
            command, output = steps[-1]
            steps[-1] = (command, output + line + "\n")
    return shop, steps


def _normal(text: str) -> str:
    return FRAME.sub("  <frame>", TIME.sub("<time>", HEX_ID.sub("<id>", text)))


def test_the_failures_session_prints_what_the_page_shows(tmp_path: Path) -> None:
    shop, steps = _session()
    (tmp_path / "shop.py").write_text(shop, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "EVENTBUS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `python`: ours
    env["PYTHONPATH"] = str(ROOT)
    listed = ""
    for command, shown in steps:
        if m := re.search(r"failures show ([0-9a-f]{6,})", command):  # the page's id: ours
            oldest = listed.splitlines()[-2].split()[0]  # the list's last row
            command = command.replace(m[1], oldest[: len(m[1])])
        proc = subprocess.run(
            ["bash", "-c", f"exec 2>&1\n{command}"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, f"$ {command}\n{proc.stdout}"
        assert _normal(proc.stdout) == _normal(shown), f"$ {command}"
        if "failures list" in command:
            listed = proc.stdout
