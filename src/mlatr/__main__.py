import sys

from mlatr.cli import main

sys.exit(main())
