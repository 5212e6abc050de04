import sys

from mbde_core.cli.main import main

sys.exit(main())
