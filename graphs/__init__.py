"""Built-in model graphs. Importing this package registers them in pase.registry.MODELS.

The paper's five (alexnet, inception, resnet, rnnlm, transformer), the small test
graphs, and the model zoo of today's workloads (bert, densenet, gpt, llama, moe, unet, vit).
"""
from pase.graphs import (  # noqa: F401
    alexnet,
    bert,
    deepseek,
    densenet,
    gpt,
    inception,
    llama,
    moe,
    nemotron3,
    resnet,
    rnnlm,
    small,
    transformer,
    unet,
    vit,
)
