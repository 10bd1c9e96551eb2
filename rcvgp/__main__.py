"""``python -m rcvgp`` is the ``rcvgp`` command."""

import sys

from rcvgp.cli import main

sys.exit(main())
