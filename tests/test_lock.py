"""The lock files pin what pyproject.toml allows, and this environment is what the lock says."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def pins(lock: Path) -> dict[str, tuple[str, Marker | None]]:
    """``name -> (version, marker)`` of a requirements file written by ``uv pip compile``."""
    found: dict[str, tuple[str, Marker | None]] = {}
    for line in lock.read_text().splitlines():
        if not line or line[0] in " #-":
            continue
        req = Requirement(line.rstrip(" \\"))
        (spec,) = req.specifier
        assert spec.operator == "==", line
        found[canonicalize_name(req.name)] = (spec.version, req.marker)
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in
            [*project["dependencies"], *project["optional-dependencies"]["test"]]]


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    locked = pins(ROOT / "requirements.lock")
    for req in declared():
        version, _ = locked[canonicalize_name(req.name)]
        assert req.specifier.contains(version, prereleases=True), (req, version)


def test_the_image_lock_is_the_runtime_part_of_the_full_lock() -> None:
    full = pins(ROOT / "requirements.lock")
    runtime = pins(ROOT / "requirements-runtime.lock")
    assert {name: v for name, (v, _) in runtime.items()} == {
        name: full[name][0] for name in runtime}
    assert "pytest" not in runtime and "litellm" in runtime


def test_unused_dependencies_are_gone() -> None:
    assert "stamina" not in {canonicalize_name(r.name) for r in declared()}


def test_this_environment_has_the_locked_versions() -> None:
    wrong = {}
    for name, (version, marker) in pins(ROOT / "requirements.lock").items():
        if marker is not None and not marker.evaluate():
            continue
        installed = metadata.version(name)
        if installed != version:
            wrong[name] = (installed, version)
    assert wrong == {}, "run `make deps` (installed, locked): " + repr(wrong)
