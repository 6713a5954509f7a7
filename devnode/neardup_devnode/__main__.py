"""``python -m neardup_devnode start|stop|status``: the launcher's commands without the ``neardup`` command."""

import sys

from .cli import main

sys.exit(main())
