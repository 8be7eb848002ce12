"""Repeated blocks: found, folded into (min, +) matrix powers, predicted in dry runs."""
