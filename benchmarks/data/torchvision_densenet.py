"""torchvision's DenseNet-121 as a user writes it, for ``benchmarks/dense.py`` (nothing
downloaded: random weights)."""
import torch
import torchvision


def densenet121(batch: int = 128, image: int = 224):
    torch.manual_seed(0)
    return torchvision.models.densenet121().eval(), (torch.randn(batch, 3, image, image),)
