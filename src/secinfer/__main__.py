import sys

from secinfer.cli.main import main

sys.exit(main())
