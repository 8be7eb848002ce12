"""GPT-2's ends without its blocks: a token embedding, a LayerNorm, an LM head tied to
the embedding and a cross-entropy loss. With a vocabulary of 67 (a prime) no split
factor above 1 divides it: a vocabulary split pads, as Megatron-LM pads it."""
import torch
from torch import nn
from torch.nn import functional as F


class TiedHead(nn.Module):
    def __init__(self, vocab=67, width=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        logits = self.lm_head(self.ln_f(self.wte(idx)))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def build(batch=2, seq=4, vocab=67, width=8):
    torch.manual_seed(0)
    model = TiedHead(vocab, width)
    ids = torch.randint(0, vocab, (batch, seq))
    return model, (ids, torch.roll(ids, -1, 1))
