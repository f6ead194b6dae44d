"""``ngramd bench``: the case format and case makers, one case run side by side against its
baselines (``runner``), and the report.

May import anything below it; only ``ngramd.daemon.cli`` imports it.
"""
