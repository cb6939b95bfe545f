"""The custom resources as pydantic models (group ``kappa.dev``, version ``v1alpha1``): the one
source of truth for ``crds/*.yaml`` (``kappa crds``), the operator's decisions and ``kappa run``."""
