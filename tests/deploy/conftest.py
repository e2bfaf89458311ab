"""Fixtures shared by the tests of tests/deploy/."""

from __future__ import annotations

import pytest

from support.deploykit import (
    DEPLOY,
    Stage,
    read_dockerfile,
)


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return read_dockerfile(DEPLOY / "Dockerfile")


@pytest.fixture(scope="module")
def final(dockerfile: tuple[dict[str, str], list[Stage]]) -> Stage:
    return dockerfile[1][-1]
