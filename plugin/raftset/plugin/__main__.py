"""`python -m raftset.plugin`: the same as the `kubectl-raftset` console script."""

import sys

from raftset.plugin.cli import main

sys.exit(main())
