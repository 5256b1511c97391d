"""The earlier home of the TRL presets: ``vpo.integrations.trl.config`` under its old name
(deprecated, with a date: importing it warns).

Usage::

    from vpo.integrations.trl_config import RLConfig    # same object as vpo.integrations.trl.config.RLConfig
"""

from vpo.deprecation import warn_deprecated
from vpo.integrations.trl.config import *  # noqa: F403
from vpo.integrations.trl.config import __all__  # noqa: F401

warn_deprecated("vpo.integrations.trl_config", "vpo.integrations.trl.config", stacklevel=2)
