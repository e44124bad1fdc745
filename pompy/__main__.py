import sys

from pompy.cli import main

sys.exit(main())
