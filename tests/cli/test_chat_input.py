"""`pilothouse chat` reads its input from a terminal, a pipe, a file or /dev/null."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pilothouse.cli._chat import _Lines

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def read_all(fd: int) -> list[str]:
    lines = _Lines(fd)
    read: list[str] = []
    while (line := await lines.readline()) is not None:
        read.append(line)
    return read


async def test_questions_redirected_from_a_file_are_read_line_by_line(tmp_path: Path) -> None:
    # `pilothouse chat SUMBRAND < questions.txt`: epoll refuses a regular file.
    questions = tmp_path / "questions.txt"
    questions.write_text("Summarize it.\nShorter.\n/exit\n", encoding="utf-8")
    fd = os.open(questions, os.O_RDONLY)
    try:
        assert await read_all(fd) == ["Summarize it.", "Shorter.", "/exit"]
    finally:
        os.close(fd)


async def test_input_from_dev_null_ends_the_session_at_once() -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        assert await read_all(fd) == []
    finally:
        os.close(fd)


async def test_a_pipe_is_still_waited_on() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"first\nsecond")
    os.close(write_end)
    try:
        assert await read_all(read_end) == ["first", "second"]
    finally:
        os.close(read_end)
