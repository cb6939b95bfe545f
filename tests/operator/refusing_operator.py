"""``python -m tests.operator.refusing_operator ARGS``: ``kappa ARGS`` with every function that
reads rows or copies files made to raise (``kube.DATA_PLANE``), for tests that run the
operator as its own process. Each refused call is appended to the file named by
``KAPPA_TEST_REFUSED``, so the test can assert there were none."""

from __future__ import annotations

import os
import sys

from tests.operator.kube import refuse_data_plane


def _note(name: str) -> None:
    with open(os.environ["KAPPA_TEST_REFUSED"], "a") as f:
        f.write(name + "\n")


if __name__ == "__main__":
    refuse_data_plane(setattr, _note)
    from kappa_operator.cli import main

    sys.exit(main(sys.argv[1:]))
