"""A Backfill's decisions (pure), one module per concept: what a decision asks for
(``intent``), deciding the next step (``decide``), the dry run (``dry_run``), the end through
publish (``publish``) and the progress a person watches (``progress``)."""
