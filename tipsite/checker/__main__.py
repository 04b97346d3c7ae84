import sys

from tipsite.checker.cli import main

sys.exit(main())
