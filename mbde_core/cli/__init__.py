"""Command-line interface of mbde (``mbde`` console script)."""


def main(argv=None):
    """Entry point of the ``mbde`` console script."""
    from mbde_core.cli.main import main as _main

    return _main(argv)
