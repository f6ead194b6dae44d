"""The ``ngramd`` command line: the composition root, the one place that builds a runtime, an
engine, an index and a service together. Each subcommand is its own module, imported lazily so
that ``ngramd lsp`` starts without torch.

May import every other package.
"""
