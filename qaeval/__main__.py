import sys

from qaeval.cli import main

sys.exit(main())
