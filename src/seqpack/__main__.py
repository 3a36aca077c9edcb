import sys

from seqpack.cli.main import main

sys.exit(main())
