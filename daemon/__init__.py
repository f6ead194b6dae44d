"""The ngramd daemon: model, engine, service and command line."""


def package_version() -> str:
    """The installed ngramd version ("0.0.0" when run from a tree that was not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ngramd")
    except PackageNotFoundError:
        return "0.0.0"
