import sys

from mas_orchestra.cli import main

sys.exit(main())
