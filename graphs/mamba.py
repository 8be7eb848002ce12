"""A Mamba-2 mixer (Dao & Gu 2024) priced by its chunked scan (SSD), from existing op kinds.

The sequence is cut into ``seq / Q`` chunks of ``Q`` positions (the config's
``chunk_size``): every tensor of the mixer is ``(b, l, s, ...)`` with ``l`` the chunk
(role ``sequence``) and ``s`` (and ``m``, a key position) the position in it. Heads are
``(g, r)``: ``g = n_groups`` groups of ``r = heads / n_groups`` heads of ``k =
head_dim``, each group sharing one ``B`` and one ``C`` of ``n = d_state`` entries, as
Megatron-LM's MambaMixer lays them out. Both letters have the ``heads`` role and ``g``
comes first in every op, so tensor parallelism splits the groups (with their heads and
their ``B``, ``C``): tp must divide ``n_groups``, as Megatron requires, and
:func:`pase.perf.layout.check_graph` refuses any other tp.

Ops, per layer (``p.mixer.*``):

- ``in_proj.z``, ``.x``, ``.B``, ``.C``, ``.dt``: five einsums of one input (Megatron's
  one GEMM, cut where the shapes differ; pase.perf all-reduces their input gradient once);
- ``conv_x``, ``conv_b``, ``conv_c``: the depthwise causal conv1d (``conv_kernel`` taps,
  a bias, SiLU) as memory-bound Elementwise ops holding its weights;
- ``dt``: softplus(dt + dt_bias); ``decay``: the within-chunk cumulative sum of
  ``dt * A`` (``A = -exp(A_log)``), both memory-bound;
- the scan: ``x_in`` scales each input row by ``dt exp(-A_m)``; ``scores`` is
  ``C Bᵀ`` per chunk and group ``(b, l, g, Q, Q)`` (what the Triton kernel
  ``_bmm_chunk_fwd`` writes); ``diag`` applies it (causal) to the scaled inputs;
  ``chunk_states`` is ``Bᵀ x`` per chunk ``(b, l, g, r, head_dim, d_state)``;
  ``state_passing`` carries the states from chunk to chunk (a sequential, memory-bound
  pass, as ``_state_passing_fwd`` is); ``state_out`` is ``C · state``; ``out_scale``
  multiplies the sum by ``exp(A_s)``. The decay ``exp(A_s - A_m)`` of the SSD matrix
  factors as ``exp(A_s) exp(-A_m)``, so no ``(Q, Q)`` tensor per head is stored (the
  kernel applies the decay per head in SRAM); the FLOP are those of the chunked form;
- ``skip``: ``+ D x``; ``gate``: ``* silu(z)``; ``norm``: the gated RMSNorm (its scale,
  ``heads x head_dim``, over the flattened inner dim ``i``; Megatron normalises per
  group, the same bytes); ``out_proj``: ``(b, l, s, i) -> (b, l, s, width)``.

The scan is about a dozen kernels here where the Triton implementation fuses it into
five, so its memory-bound part is priced high (a few percent of a layer's time).

Parameters equal Hugging Face ``NemotronHMamba2Mixer``'s: in_proj ``width x (2 I + 2 G N
+ H)``, conv1d ``(I + 2 G N) x (K + 1)``, ``dt_bias``, ``A_log``, ``D`` (``H`` each), the
norm ``I`` and out_proj ``I x width`` (``I = H x head_dim``).

Context parallelism splits the chunks ``l``: each rank does ``1 / cp`` of the scan's
work, as Megatron-LM's hidden-parallel CP for Mamba does (an all-to-all before and after
the conv and scan so that each rank holds ``heads / cp`` heads of the whole sequence);
pase.perf prices no exchange for it (it prices ring attention only).
"""
from __future__ import annotations

from pase.builder import GraphBuilder, Value
from pase.graphs.zoo import require

ROLES = {"b": "batch", "l": "sequence", "s": "other", "m": "other", "g": "heads", "r": "heads",
         "k": "channel", "n": "channel", "e": "channel", "i": "heads"}
_SILU = 4  # FLOP per element of SiLU (graphs.zoo.ACT_PW["silu"])


def check(model: str, *, seq: int, heads: int, groups: int, chunk: int) -> None:
    """Sizes the mixer needs: heads in whole groups, whole chunks."""
    require(model, heads % groups == 0,
            f"n_groups ({groups}) must divide mamba_heads ({heads}): each group of B, C "
            f"serves mamba_heads / n_groups heads")
    q = min(chunk, seq)
    require(model, seq % q == 0, f"seq ({seq}) must be a multiple of chunk ({chunk})")


def mixer(b: GraphBuilder, x: Value, p: str, *, heads: int, head_dim: int, state: int,
          groups: int, conv_kernel: int, chunk: int) -> Value:
    """The Mamba-2 mixer of ``x (b, l, width)``: returns ``(b, l, width)`` (no residual)."""
    batch, seq, width = x.shape
    q = min(chunk, seq)
    c, g, r = seq // q, groups, heads // groups
    e = ROLES

    def ein(eq: str, u: Value, v: Value, name: str, pw: float = 0) -> Value:
        return b.einsum(eq, u, v, pw=pw, name=f"{p}.{name}", roles=e)

    h = b.reshape(x, (batch, c, q, width), names=("b", "l", "s", "e"),
                  roles=("batch", "sequence", "other", "channel"), name=f"{p}.chunks")
    hk, gn = (g, r, width, head_dim), (g, width, state)
    z = ein("blse,grek->blsgrk", h, b.input(hk, names=("g", "r", "e", "k")), "in_proj.z")
    xs = ein("blse,grek->blsgrk", h, b.input(hk, names=("g", "r", "e", "k")), "in_proj.x")
    bm = ein("blse,gen->blsgn", h, b.input(gn, names=("g", "e", "n")), "in_proj.B")
    cm = ein("blse,gen->blsgn", h, b.input(gn, names=("g", "e", "n")), "in_proj.C")
    dt = ein("blse,egr->blsgr", h, b.input((width, g, r), names=("e", "g", "r")), "in_proj.dt")

    taps = 2 * conv_kernel + _SILU  # K multiply-adds and SiLU per element
    xs = b.elementwise(xs, pw=taps, name=f"{p}.conv_x",
                       weights=[(conv_kernel, g, r, head_dim), (g, r, head_dim)])
    bm = b.elementwise(bm, pw=taps, name=f"{p}.conv_b", weights=[(conv_kernel, g, state), (g, state)])
    cm = b.elementwise(cm, pw=taps, name=f"{p}.conv_c", weights=[(conv_kernel, g, state), (g, state)])
    dt = b.elementwise(dt, pw=_SILU, name=f"{p}.dt", weights=[(g, r)])  # softplus(dt + dt_bias)
    decay = b.elementwise(dt, pw=3, name=f"{p}.decay", weights=[(g, r)])  # cumsum(dt * A), A_log

    x_in = ein("blsgrk,blsgr->blsgrk", xs, decay, "x_in")  # x dt exp(-A), per input position
    scores = ein("blsgn,blmgn->blgsm", cm, bm, "scores")  # C Bᵀ per chunk and group
    diag = ein("blgsm,blmgrk->blsgrk", scores, x_in, "diag")  # causal within the chunk
    states = ein("blmgn,blmgrk->blgrkn", bm, x_in, "chunk_states")
    states = b.elementwise(states, pw=2, name=f"{p}.state_passing")
    off = ein("blsgn,blgrkn->blsgrk", cm, states, "state_out")
    y = b.elementwise(diag, off, name=f"{p}.scan_sum")
    y = ein("blsgrk,blsgr->blsgrk", y, decay, "out_scale")  # exp(A), per output position
    y = b.elementwise(y, xs, name=f"{p}.skip", weights=[(g, r, 1)])  # + D x
    y = b.elementwise(y, z, pw=1 + _SILU, fn="mul", name=f"{p}.gate")  # y * silu(z)
    y = b.reshape(y, (batch, c, q, heads * head_dim), names=("b", "l", "s", "i"),
                  roles=("batch", "sequence", "other", "heads"), name=f"{p}.flat")
    y = b.norm(y, axis=-1, weights=1, rms=True, name=f"{p}.norm")
    y = ein("blsi,ie->blse", y, b.input((heads * head_dim, width), names=("i", "e")), "out_proj")
    return b.reshape(y, (batch, seq, width), names=("b", "l", "e"),
                     roles=("batch", "sequence", "channel"), name=f"{p}.unchunk")
