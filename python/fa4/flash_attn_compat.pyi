# flash-attn 2's drop-in (and vLLM's varlen call); see flash_attn_compat.py.
from typing import Any, Optional, Tuple, Union

from ._types import FlashWindow, Tensor

def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                    causal: bool = ..., window_size: FlashWindow = ..., softcap: float = ...,
                    alibi_slopes: None = ..., deterministic: bool = ...,
                    return_attn_probs: bool = ...) -> Union[Tensor, Tuple[Tensor, Tensor, None]]: ...
def flash_attn_kvpacked_func(q: Tensor, kv: Tensor, dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                             causal: bool = ..., window_size: FlashWindow = ..., softcap: float = ...,
                             alibi_slopes: None = ..., deterministic: bool = ...,
                             return_attn_probs: bool = ...) -> Union[Tensor, Tuple[Tensor, Tensor, None]]: ...
def flash_attn_qkvpacked_func(qkv: Tensor, dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                              causal: bool = ..., window_size: FlashWindow = ..., softcap: float = ...,
                              alibi_slopes: None = ..., deterministic: bool = ...,
                              return_attn_probs: bool = ...) -> Union[Tensor, Tuple[Tensor, Tensor, None]]: ...
def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor] = ...,
                           cu_seqlens_k: Optional[Tensor] = ..., max_seqlen_q: Optional[Union[int, Tensor]] = ...,
                           max_seqlen_k: Optional[Union[int, Tensor]] = ..., dropout_p: float = ...,
                           softmax_scale: Optional[float] = ..., causal: bool = ..., window_size: FlashWindow = ...,
                           softcap: float = ..., alibi_slopes: None = ..., deterministic: bool = ...,
                           return_attn_probs: bool = ..., block_table: Optional[Tensor] = ..., *,
                           seqused_k: Optional[Tensor] = ..., out: Optional[Tensor] = ...,
                           return_softmax_lse: bool = ..., q_descale: Optional[Tensor] = ...,
                           k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ..., num_splits: int = ...,
                           s_aux: Optional[Tensor] = ..., scheduler_metadata: Any = ..., fa_version: Optional[int] = ...,
                           q_v: None = ..., cp_world_size: int = ..., cp_rank: int = ...,
                           cp_tot_seqused_k: None = ...) -> Union[Tensor, Tuple[Tensor, Tensor],
                                                                  Tuple[Tensor, Tensor, None]]: ...
def flash_attn_varlen_kvpacked_func(q: Tensor, kv: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                                    max_seqlen_q: Optional[Union[int, Tensor]],
                                    max_seqlen_k: Optional[Union[int, Tensor]], dropout_p: float = ...,
                                    softmax_scale: Optional[float] = ..., causal: bool = ...,
                                    window_size: FlashWindow = ..., softcap: float = ..., alibi_slopes: None = ...,
                                    deterministic: bool = ...,
                                    return_attn_probs: bool = ...) -> Union[Tensor, Tuple[Tensor, Tensor, None]]: ...
def flash_attn_varlen_qkvpacked_func(qkv: Tensor, cu_seqlens: Tensor, max_seqlen: Optional[Union[int, Tensor]],
                                     dropout_p: float = ..., softmax_scale: Optional[float] = ...,
                                     causal: bool = ..., window_size: FlashWindow = ..., softcap: float = ...,
                                     alibi_slopes: None = ..., deterministic: bool = ...,
                                     return_attn_probs: bool = ...) -> Union[Tensor, Tuple[Tensor, Tensor, None]]: ...
def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor] = ...,
                            v: Optional[Tensor] = ..., rotary_cos: None = ..., rotary_sin: None = ...,
                            cache_seqlens: Optional[Union[int, Tensor]] = ..., cache_batch_idx: Optional[Tensor] = ...,
                            cache_leftpad: None = ..., block_table: Optional[Tensor] = ...,
                            softmax_scale: Optional[float] = ..., causal: bool = ..., window_size: FlashWindow = ...,
                            softcap: float = ..., rotary_interleaved: bool = ..., alibi_slopes: None = ...,
                            num_splits: int = ...,
                            return_softmax_lse: bool = ...) -> Union[Tensor, Tuple[Tensor, Tensor]]: ...
