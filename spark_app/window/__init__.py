"""A backfill's window, settled before any row is read: its edges (which sources the pipeline
really reads, the warm-up its state needs before the window's start, the drain that closes what
starts inside it: ``edges``), the pipeline's state horizon those come from (``horizon``), and
the lateness guard that refuses a run whose pipeline would drop rows as late (``lateness``)."""
