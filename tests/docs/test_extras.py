"""The engine extras install what runs: where ``vpo[verl]``, ``vpo[vllm]`` or ``vpo[openrlhf]``
is installed, every requirement of the extra is there and the engine's entry modules import
(verl's v1 trainer needs TransferQueue, which ``verl==0.9.1`` alone does not bring)."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

ENGINE_IMPORTS = {
    # extra: (its engine's distribution, the modules a run imports)
    "verl": ("verl", ["transfer_queue", "verl.trainer.ppo.v1", "verl.trainer.main_ppo",
                      "vpo.integrations.verl_plugin", "vpo.integrations.verl_main"]),
    "vllm": ("vllm", ["vllm", "vpo.sampling.vllm"]),
    "openrlhf": ("openrlhf", ["openrlhf.cli.train_ppo_ray", "vpo.integrations.openrlhf"]),
}


def _requirement(text: str):
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover
        from pip._vendor.packaging.requirements import Requirement
    return Requirement(text)


def unmet(requirements: list[str]) -> list[str]:
    """The requirements (marker-free ones, and those whose marker holds here) not installed in range."""
    gaps = []
    for text in requirements:
        req = _requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            gaps.append(f"{req.name} (not installed)")
            continue
        if req.specifier and not req.specifier.contains(version.split("+")[0], prereleases=True):
            gaps.append(f"{req.name} {version} (wanted {req.specifier})")
    return gaps


def test_every_engine_extra_is_declared():
    assert set(ENGINE_IMPORTS) <= set(EXTRAS)
    assert any(re.match(r"transferqueue", r, re.I) for r in EXTRAS["verl"])
    assert EXTRAS["vllm"] == ["vllm==0.24.0"]


@pytest.mark.parametrize("extra", sorted(ENGINE_IMPORTS))
def test_an_installed_engine_extra_imports(extra):
    engine, modules = ENGINE_IMPORTS[extra]
    try:
        own = md.requires(engine) or []
    except md.PackageNotFoundError:
        pytest.skip(f"vpo[{extra}] is not installed here ({engine} is missing)")
    if unmet(own):  # e.g. scripts/install.sh puts OpenRLHF's source in with --no-deps, for its parser tests
        pytest.skip(f"{engine} is installed without its own requirements ({', '.join(unmet(own)[:3])}, ...): "
                    f"not an install of vpo[{extra}]")
    gaps = unmet(EXTRAS[extra])
    assert not gaps, (f"vpo[{extra}]: {engine} is installed but not all of the extra: {', '.join(gaps)}; "
                      "re-run scripts/install.sh (or pip install -e '.[" + extra + "]')")
    for module in modules:
        importlib.import_module(module)
