"""The ``vpo`` command: a thin argparse front over ``vpo.commands.*``.

Usage: ``vpo --help``; ``python -m vpo`` is the same command.

Each subcommand lives in its own module under ``vpo/commands/`` exposing
``register(subparsers)``; that function adds a parser and sets ``func`` to the callable
that runs it. Command modules import heavy libraries (torch, TRL) only inside their run
functions, so ``vpo --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import typing

from vpo.reward_failures import RewardFailureError

# Order is the order shown in --help. A module missing here is simply not offered.
COMMAND_MODULES = (
    "vpo.commands.advantages",
    "vpo.commands.data",
    "vpo.commands.demo",
    "vpo.commands.train",
    "vpo.commands.eval",
    "vpo.commands.search",
    "vpo.commands.rewards",
    "vpo.commands.warmup",
)


class OneLineErrors(argparse.ArgumentParser):
    """argparse whose usage errors are one line (the usage block of a subcommand runs to dozens
    of lines and buries the message); its subcommand parsers inherit the class."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="vpo",
        description="Vector Policy Optimization: vector rewards, multi-answer chains, set objectives.",
    )
    parser.add_argument("--version", action="version", version=f"vpo {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:  # command not written yet
                continue
            raise
        module.register(subparsers)
    return parser


RESUME_HINTS = {
    "demo": "run the same command again to resume",
    "train": "run the same command with --resume-from-checkpoint latest to continue from the last checkpoint "
             "(saved every --save-steps steps)",
}
"""What to type after Ctrl-C, for the commands that pick up where an interrupted run stopped."""


def version() -> str:
    """The installed version of vpo (the package metadata; the source tree's when not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("vpo")
    except PackageNotFoundError:
        from vpo import __version__

        return __version__


def one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     line: str | None = None) -> str:
    """A warning as a command shows it: ``warning: Category: message`` on one line, without the
    file and the source line Python adds (code inside vpo or a library, which the user of a command
    cannot act on; ``vpo rewards check`` prints its warnings the same way)."""
    return f"warning: {category.__name__}: {message}\n"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    import warnings

    shown = warnings.formatwarning
    warnings.formatwarning = one_line_warning
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
            BlockingIOError) as err:
        print(f"vpo {args.command}: error: {err}", file=sys.stderr)
        return 2
    except RewardFailureError as err:  # the run's reward functions failed too often: a message, not a traceback
        print(f"vpo {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        hint = RESUME_HINTS.get(args.command)
        # on a line of its own: a progress bar leaves the cursor mid-line
        print(f"\nvpo {args.command}: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
        return 130
    finally:
        from vpo.runs import release_out_dir

        warnings.formatwarning = shown
        release_out_dir()  # the --out lock lasts as long as the command
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
