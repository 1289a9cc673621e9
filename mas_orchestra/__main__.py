"""``python -m mas_orchestra``: the ``mas-orchestra`` command line."""

import sys

from mas_orchestra.cli import main

sys.exit(main())
