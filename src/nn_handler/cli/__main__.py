"""``python -m nn_handler.cli``: the ``nn-handler`` command."""

from . import main

raise SystemExit(main())
