"""Built-in model graphs. Importing this package registers them in pase.registry.MODELS."""
from pase.graphs import alexnet, rnnlm, small  # noqa: F401
