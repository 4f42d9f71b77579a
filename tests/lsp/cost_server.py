"""`dojo-lsp` whose cost model is a file that is not one (`not-a-model.npz`, written next to the
server's working directory's temporary files), for the test of a model that cannot be loaded.

    python tests/lsp/cost_server.py [dojo-lsp's arguments]
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from server.lsp import ratings  # noqa: E402
from server.lsp.main import main  # noqa: E402

if __name__ == "__main__":
    broken = Path(tempfile.mkdtemp()) / "not-a-model.npz"
    broken.write_bytes(b"not a model")
    ratings.Ratings.__init__ = functools.partialmethod(ratings.Ratings.__init__, model=broken)
    sys.exit(main(sys.argv[1:]))
