"""``python -m tipsite.records ...`` (:mod:`tipsite.records.cli`)."""

import sys

from tipsite.records.cli import main

sys.exit(main())
