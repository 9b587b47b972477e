# flash-attn 3's drop-in; see flash_attn_interface.py.
from typing import Any, Optional, Tuple, Union

from ._types import FlashWindow, Tensor

def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, softmax_scale: Optional[float] = ..., causal: bool = ...,
                    qv: None = ..., q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                    v_descale: Optional[Tensor] = ..., window_size: FlashWindow = ..., attention_chunk: int = ...,
                    softcap: float = ..., num_splits: int = ..., pack_gqa: Optional[bool] = ...,
                    deterministic: bool = ..., sm_margin: int = ..., return_attn_probs: bool = ..., *,
                    out: Optional[Tensor] = ..., learnable_sink: Optional[Tensor] = ...,
                    s_aux: Optional[Tensor] = ...) -> Union[Tensor, Tuple[Tensor, Tensor]]: ...
def flash_attn_qkvpacked_func(qkv: Tensor, softmax_scale: Optional[float] = ..., causal: bool = ...,
                              q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                              v_descale: Optional[Tensor] = ..., window_size: FlashWindow = ...,
                              attention_chunk: int = ..., softcap: float = ..., deterministic: bool = ...,
                              num_heads_q: Optional[int] = ..., sm_margin: int = ..., return_attn_probs: bool = ...,
                              *, out: Optional[Tensor] = ..., learnable_sink: Optional[Tensor] = ...,
                              s_aux: Optional[Tensor] = ...) -> Union[Tensor, Tuple[Tensor, Tensor]]: ...
def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Optional[Tensor],
                           max_seqlen_q: Optional[Union[int, Tensor]], max_seqlen_k: Optional[Union[int, Tensor]],
                           seqused_q: Optional[Tensor] = ..., seqused_k: Optional[Tensor] = ...,
                           softmax_scale: Optional[float] = ..., causal: bool = ..., qv: None = ...,
                           q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                           v_descale: Optional[Tensor] = ..., window_size: FlashWindow = ...,
                           attention_chunk: int = ..., softcap: float = ..., num_splits: int = ...,
                           pack_gqa: Optional[bool] = ..., deterministic: bool = ..., sm_margin: int = ...,
                           return_attn_probs: bool = ..., *, out: Optional[Tensor] = ...,
                           learnable_sink: Optional[Tensor] = ..., s_aux: Optional[Tensor] = ...,
                           page_table: Optional[Tensor] = ...) -> Union[Tensor, Tuple[Tensor, Tensor]]: ...
def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor] = ...,
                            v: Optional[Tensor] = ..., qv: None = ..., rotary_cos: None = ..., rotary_sin: None = ...,
                            cache_seqlens: Optional[Union[int, Tensor]] = ..., cache_batch_idx: Optional[Tensor] = ...,
                            cache_leftpad: None = ..., page_table: Optional[Tensor] = ...,
                            cu_seqlens_q: Optional[Tensor] = ..., cu_seqlens_k_new: None = ...,
                            max_seqlen_q: Optional[int] = ..., rotary_seqlens: None = ...,
                            q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                            v_descale: Optional[Tensor] = ..., softmax_scale: Optional[float] = ...,
                            causal: bool = ..., window_size: FlashWindow = ..., attention_chunk: int = ...,
                            softcap: float = ..., rotary_interleaved: bool = ..., scheduler_metadata: Any = ...,
                            num_splits: int = ..., pack_gqa: Optional[bool] = ..., sm_margin: int = ...,
                            return_softmax_lse: bool = ..., *, out: Optional[Tensor] = ...,
                            learnable_sink: Optional[Tensor] = ..., s_aux: Optional[Tensor] = ...
                            ) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor, Tensor]]: ...
def flash_attn_combine(out_partial: Tensor, lse_partial: Tensor, out: Optional[Tensor] = ...,
                       out_dtype: Any = ...) -> Tuple[Tensor, Tensor]: ...
