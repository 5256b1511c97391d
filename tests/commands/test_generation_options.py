"""--temperature, --top-p and --max-new-tokens are declared once (``GenerationOptions``): every
command that samples inherits them, and a command whose budget means something else changes only
its default, range and help, keeping its flag spellings."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from vpo.commands.eval import EvalConfig
from vpo.commands.options import GenerationOptions, PoolOptions
from vpo.commands.search import BestOfNConfig, OpenEvolveConfig
from vpo.commands.warmup import WarmupConfig
from vpo.config import add_dataclass_args, check_fields, dataclass_from_args, field_like

FLAGS = ("temperature", "top_p", "max_new_tokens")


def fields_of(cls):
    return {f.name: f for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("config", [PoolOptions, EvalConfig, BestOfNConfig, WarmupConfig, OpenEvolveConfig])
def test_every_sampling_command_inherits_the_one_declaration(config):
    assert issubclass(config, GenerationOptions)
    declared = {name: cls for cls in reversed(config.__mro__) for name in getattr(cls, "__annotations__", {})
                if name in FLAGS}
    assert set(declared) == set(FLAGS)
    # a field a command redeclares is one that changes the shared rule, not a copy of it
    shared = fields_of(GenerationOptions)
    for name in FLAGS:
        if declared[name] is not GenerationOptions:
            assert (fields_of(config)[name].default, dict(fields_of(config)[name].metadata)) != \
                   (shared[name].default, dict(shared[name].metadata)), (config.__name__, name)


def test_the_commands_keep_their_defaults_and_ranges():
    assert [getattr(EvalConfig(), n) for n in FLAGS] == [0.7, 1.0, 0]
    assert [getattr(BestOfNConfig(), n) for n in FLAGS] == [0.7, 1.0, 0]
    assert [getattr(WarmupConfig(), n) for n in FLAGS] == [0.7, 1.0, 64]
    assert [getattr(OpenEvolveConfig(), n) for n in FLAGS] == [0.7, 1.0, 512]
    check_fields(OpenEvolveConfig(temperature=0.0))  # greedy: only OpenEvolve's search takes 0
    for config, field, value, message in [
        (EvalConfig, "temperature", 0.0, "--temperature must be > 0"),
        (WarmupConfig, "max_new_tokens", 0, "--max-new-tokens must be >= 1"),
        (OpenEvolveConfig, "max_new_tokens", 0, "--max-new-tokens must be >= 1"),
        (OpenEvolveConfig, "top_p", 1.5, "--top-p must be > 0 and <= 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_fields(config(**{field: value}))


def test_openevolve_keeps_its_max_tokens_flag():
    parser = argparse.ArgumentParser()
    add_dataclass_args(parser, OpenEvolveConfig)
    for flag in ("--max-tokens", "--max-new-tokens"):
        assert dataclass_from_args(OpenEvolveConfig, parser.parse_args([flag, "96"])).max_new_tokens == 96


def test_field_like_replaces_a_default_and_drops_a_bound_given_as_none():
    @dataclasses.dataclass
    class Budget(GenerationOptions):
        temperature: float = field_like(GenerationOptions, "temperature", above=None, min=0.0)
        max_new_tokens: int = field_like(GenerationOptions, "max_new_tokens", default=32)

    fields = fields_of(Budget)
    assert fields["max_new_tokens"].default == 32 and fields["max_new_tokens"].metadata["min"] == 0
    assert "above" not in fields["temperature"].metadata and fields["temperature"].metadata["min"] == 0.0
    assert fields["temperature"].metadata["help"] == fields_of(GenerationOptions)["temperature"].metadata["help"]
