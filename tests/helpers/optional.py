"""Whether an optional engine (verl, SkyRL) is installed, for the tests that need one to skip without it."""

from importlib.metadata import PackageNotFoundError, version


def installed(distribution: str) -> bool:
    """The installed distribution, not an import: with recipes/ on sys.path (some tests add it), recipes/verl/ would
    import as an empty namespace package where verl is absent."""
    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True
