"""``python -m daemon.cli``: the ``ngramd`` console script without its wrapper."""

import sys

from daemon.cli.main import main

sys.exit(main())
