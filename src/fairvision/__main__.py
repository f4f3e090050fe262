import sys

from fairvision.cli import main

sys.exit(main())
