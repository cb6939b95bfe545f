"""The global watermark coordinator: a pure core (core.py) that folds members' watermark
reports into each alignment group's global watermark and drift bound, with time passed in
rather than read, so every rule (holding, finishing, regression, idleness) is testable
without a clock or a network; the service around it only adds transport and persistence.
"""
