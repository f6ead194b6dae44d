"""Line breaks, counted one way everywhere: ``\\r\\n``, ``\\n`` and a lone ``\\r`` each end a line.

It is the LSP specification's list, so that a line number means the same line in the
editor (lsp/positions.py), on the command line (daemon/cli/inputs.py) and in a bench case
made from a file (daemon/bench/cases.py); Python's ``ast`` numbers lines the same way.
Not ``str.splitlines``: its extra separators (``\\x0b``, ``\\x0c``, ``\\u2028``, ...) are
ordinary characters inside a line for an editor.
"""

from __future__ import annotations

import re

LINE_BREAK = re.compile(r"\r\n|\n|\r")
