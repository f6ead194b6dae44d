"""``python -m ngramd.daemon.cli``: the ``ngramd`` console script without its wrapper."""

import sys

from ngramd.daemon.cli.main import main

sys.exit(main())
