"""The encoder: its config, primitives (GELU, dropout, LayerNorm), packing of the real
tokens, attention, the transformer block, column parts for serving, heads."""
