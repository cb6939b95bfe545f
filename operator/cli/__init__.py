"""The ``kappa`` command: its subcommands (``commands``), the one-line errors it prints
instead of tracebacks (``errors``), and the tables it prints for people (``tables``)."""
