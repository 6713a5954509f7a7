"""``python -m scrapy_neardup``: the ``neardup`` command."""

import sys

from .cli.main import main

sys.exit(main())
