"""`python -m webhook.cli`: the `trainhook` command."""

import sys

from webhook.cli import main

sys.exit(main())
