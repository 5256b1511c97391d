"""``python -m vpo`` runs the ``vpo`` command."""

import sys

from vpo.cli import main

sys.exit(main())
