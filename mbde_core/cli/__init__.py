"""Command-line interface of mbde (``mbde`` console script)."""

from mbde_core.cli.main import main as _main


def main(argv=None):
    """Entry point of the ``mbde`` console script."""
    return _main(argv)
