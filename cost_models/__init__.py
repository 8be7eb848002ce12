"""Built-in cost models. Importing this package registers them in pase.registry.COST_MODELS."""
from pase.cost_models import alpha_beta, calibrated, paper  # noqa: F401
