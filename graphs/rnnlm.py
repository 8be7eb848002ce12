"""The paper's RNN language model: Embedding, a 2-layer LSTM, FC and the loss."""
from __future__ import annotations

from pase.builder import GraphBuilder, check_model_options
from pase.ir import Graph
from pase.registry import MODELS


@MODELS.register("rnnlm", "RNN language model (2-layer LSTM, vocab 100k), the paper's RNN benchmark")
def rnnlm(batch: int = 128, seq: int = 256, vocab: int = 100_000, width: int = 2048,
          layers: int = 2) -> Graph:
    check_model_options("rnnlm", batch=batch, seq=seq, vocab=vocab, width=width, layers=layers)
    b = GraphBuilder("rnnlm", cutoff=1, batch=batch)
    ids = b.input((batch, seq), names=("b", "l"))
    x = b.embedding(ids, vocab, width, name="embedding")
    x = b.lstm(x, width, layers, name="lstm")
    x = b.fc(x, vocab, name="projection")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()
