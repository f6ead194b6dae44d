"""The ngramd daemon, one subpackage per layer, lowest first: ``protocol`` (the wire),
``runtime`` (a model behind one interface), ``engine`` (speculative decoding), ``edit``,
``workspace``, ``service`` (the RPC methods), ``bench`` and ``cli`` (the composition root).
pyproject.toml's [tool.importlinter] states what each may import; a test enforces it."""


def package_version() -> str:
    """The installed ngramd version ("0.0.0" when run from a tree that was not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ngramd")
    except PackageNotFoundError:
        return "0.0.0"
