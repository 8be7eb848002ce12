"""Models whose FLOP an embedding lookup once dominated: Hugging Face GPT-2 and
DistilBERT from small configs (nothing downloaded), and a DLRM-style recommender of
embedding tables (``nn.Embedding``, ``nn.EmbeddingBag``) and MLPs."""
import os

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model comes from its config
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Call(nn.Module):
    """A Hugging Face model called with its token ids (and ``extra`` keywords); returns
    its first output."""

    def __init__(self, model: nn.Module, **extra):
        super().__init__()
        self.model, self.extra = model, extra

    def forward(self, ids):
        return self.model(input_ids=ids, return_dict=True, **self.extra)[0]


def _ids(vocab: int, batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))


def gpt2(batch=2, seq=16):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2)  # the real 50,257 tokens
    return Call(transformers.GPT2LMHeadModel(cfg).eval(), use_cache=False), (_ids(cfg.vocab_size, batch, seq),)


def distilbert(batch=2, seq=16):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.DistilBertConfig(n_layers=1, dim=64, hidden_dim=128, n_heads=2)
    return Call(transformers.DistilBertModel(cfg).eval()), (_ids(cfg.vocab_size, batch, seq),)


def _mlp(sizes):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class Recommender(nn.Module):
    """DLRM's shape: a bottom MLP on the dense features, one table per categorical
    feature (one id each, an input of its own: nn.Embedding; a bag of ids:
    nn.EmbeddingBag), and a top MLP on them all, stacked."""

    def __init__(self, dense=13, width=16, rows=(100_000, 50_000), bag_rows=(20_000,)):
        super().__init__()
        self.bottom = _mlp([dense, 32, width])
        self.tables = nn.ModuleList([nn.Embedding(n, width) for n in rows])
        self.bags = nn.ModuleList([nn.EmbeddingBag(n, width, mode="sum") for n in bag_rows])
        self.top = _mlp([width * (1 + len(rows) + len(bag_rows)), 32, 1])

    def forward(self, dense, bags, *ids):
        parts = [self.bottom(dense)]
        parts += [table(i) for i, table in zip(ids, self.tables)]
        parts += [bag(bags[:, i]) for i, bag in enumerate(self.bags)]
        return self.top(torch.stack(parts, dim=1).flatten(1))


def dlrm(batch=8, per_bag=3):
    torch.manual_seed(0)
    model = Recommender().eval()
    g = torch.Generator().manual_seed(1)
    dense = torch.randn(batch, 13, generator=g)
    ids = [torch.randint(0, t.num_embeddings, (batch,), generator=g) for t in model.tables]
    bags = torch.stack([torch.randint(0, b.num_embeddings, (batch, per_bag), generator=g)
                        for b in model.bags], dim=1)
    return model, (dense, bags, *ids)
