# fa4.jax: fa4's attention for jax arrays as an XLA custom call (see fa4/jax.py).
from typing import Literal, Optional, Tuple, Union, overload

from ._types import Backend, Tensor, Window

TARGET: str

@overload
def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = ..., window: Window = ..., chunk: int = ...,
              softcap: float = ..., sinks: Optional[Tensor] = ..., scale: Optional[float] = ...,
              return_lse: Literal[False] = ..., backend: Backend = ..., q_descale: Optional[Tensor] = ...,
              k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ..., num_splits: int = ...,
              num_threads: int = ...) -> Tensor: ...
@overload
def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = ..., window: Window = ..., chunk: int = ...,
              softcap: float = ..., sinks: Optional[Tensor] = ..., scale: Optional[float] = ...,
              return_lse: Literal[True], backend: Backend = ..., q_descale: Optional[Tensor] = ...,
              k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ..., num_splits: int = ...,
              num_threads: int = ...) -> Tuple[Tensor, Tensor]: ...
@overload
def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, *,
                     seqused_k: Optional[Tensor] = ..., max_seqlen_q: int = ..., max_seqlen_k: int = ...,
                     causal: bool = ..., window: Window = ..., chunk: int = ..., softcap: float = ...,
                     sinks: Optional[Tensor] = ..., scale: Optional[float] = ..., return_lse: Literal[False] = ...,
                     backend: Backend = ..., q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                     v_descale: Optional[Tensor] = ..., num_splits: int = ..., num_threads: int = ...) -> Tensor: ...
@overload
def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, *,
                     seqused_k: Optional[Tensor] = ..., max_seqlen_q: int = ..., max_seqlen_k: int = ...,
                     causal: bool = ..., window: Window = ..., chunk: int = ..., softcap: float = ...,
                     sinks: Optional[Tensor] = ..., scale: Optional[float] = ..., return_lse: Literal[True],
                     backend: Backend = ..., q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                     v_descale: Optional[Tensor] = ..., num_splits: int = ...,
                     num_threads: int = ...) -> Tuple[Tensor, Tensor]: ...
# Without k / v: out, or (out, lse) with return_lse. With k / v (an append): (out, k_cache, v_cache),
# or (out, lse, k_cache, v_cache).
def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, k: Optional[Tensor] = ...,
                           v: Optional[Tensor] = ..., cache_seqlens: Optional[Union[int, Tensor]] = ...,
                           cache_batch_idx: Optional[Tensor] = ..., page_table: Optional[Tensor] = ...,
                           cu_seqlens_q: Optional[Tensor] = ..., max_seqlen_q: int = ..., num_splits: int = ...,
                           causal: bool = ..., window: Window = ..., chunk: int = ..., softcap: float = ...,
                           sinks: Optional[Tensor] = ..., scale: Optional[float] = ..., return_lse: bool = ...,
                           backend: Backend = ..., q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                           v_descale: Optional[Tensor] = ...,
                           num_threads: int = ...) -> Union[Tensor, Tuple[Tensor, ...]]: ...
