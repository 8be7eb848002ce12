"""Built-in model graphs. Importing this package registers them in pase.registry.MODELS."""
from pase.graphs import alexnet, inception, resnet, rnnlm, small, transformer  # noqa: F401
