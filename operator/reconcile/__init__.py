"""Pure decisions: given a resource and what was observed, what to do and what status to show.
Handlers (``kappa_operator.handlers``) observe, call these, and act."""
