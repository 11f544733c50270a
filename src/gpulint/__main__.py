import os
import sys

# `python -m gpulint` puts the working folder first on sys.path; inside an analysed tree that
# folder is a stranger's, and its `json.py` would be imported in place of the standard library.
# Drop it before anything else is imported (as `python -P` would).
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from gpulint.cli import main  # noqa: E402

sys.exit(main())
