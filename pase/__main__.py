import sys

from pase.cli import main

sys.exit(main())
