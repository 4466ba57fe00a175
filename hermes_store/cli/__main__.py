"""`python -m hermes_store.cli`: the `hermes-store` command."""

import sys

from . import main

sys.exit(main())
