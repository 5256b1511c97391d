"""Subcommands of the ``vpo`` CLI, one module each (see ``vpo.cli``)."""
