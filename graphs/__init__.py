"""Built-in model graphs. Importing this package registers them in pase.registry.MODELS.

The paper's five (alexnet, inception, resnet, rnnlm, transformer), the small test
graphs, and the model zoo of today's workloads (bert, deepseek, densenet, gpt, gpt_oss, llama,
llama4, moe, nemotron, nemotron3, qwen3, unet, vit).
"""
from pase.graphs import (  # noqa: F401
    alexnet,
    bert,
    deepseek,
    densenet,
    gpt,
    gpt_oss,
    inception,
    llama,
    llama4,
    moe,
    nemotron,
    nemotron3,
    qwen3,
    resnet,
    rnnlm,
    small,
    transformer,
    unet,
    vit,
)
