"""The reference solution of the multi-head attention assignment (see ``solutions.mha``)."""
from .mha import (MultiHeadAttention, attention_pool, concat_heads, head_weight_shape,
                  masked_softmax, project, project_heads, split_heads)

__all__ = ["head_weight_shape", "project", "project_heads", "split_heads", "concat_heads",
           "masked_softmax", "attention_pool", "MultiHeadAttention"]
