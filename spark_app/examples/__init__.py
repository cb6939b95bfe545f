"""Example data generators for the kappa-operator demo and tests."""
