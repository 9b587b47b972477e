from typing import List, Optional, Tuple, Union, overload, Literal

from . import flash_attn_compat as flash_attn_compat
from . import flash_attn_interface as flash_attn_interface
from ._types import Backend, Tensor, Window
from .flash_attn_compat import (
    flash_attn_func as flash_attn_func,
    flash_attn_kvpacked_func as flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func as flash_attn_qkvpacked_func,
    flash_attn_varlen_func as flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func as flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func as flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache as flash_attn_with_kvcache,
)

__version__: str
built_with_cuda: bool

class Fa4Error(Exception):
    argument: Optional[str]

class InvalidArgumentError(Fa4Error, ValueError): ...
class DTypeError(Fa4Error, TypeError): ...
class UnsupportedError(Fa4Error, ValueError): ...
class BackendUnavailableError(Fa4Error, RuntimeError): ...
class DeviceError(Fa4Error, RuntimeError): ...
class OutOfMemoryError(Fa4Error, MemoryError): ...
class InternalError(Fa4Error, RuntimeError): ...

@overload
def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = ..., window: Window = ..., chunk: int = ...,
              softcap: float = ..., sinks: Optional[Tensor] = ..., scale: Optional[float] = ...,
              return_lse: Literal[False] = ..., out: Optional[Tensor] = ..., backend: Backend = ...,
              q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ...,
              num_splits: int = ..., num_threads: int = ...) -> Tensor: ...
@overload
def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = ..., window: Window = ..., chunk: int = ...,
              softcap: float = ..., sinks: Optional[Tensor] = ..., scale: Optional[float] = ...,
              return_lse: Literal[True], out: Optional[Tensor] = ..., backend: Backend = ...,
              q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ...,
              num_splits: int = ..., num_threads: int = ...) -> Tuple[Tensor, Tensor]: ...
@overload
def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, *,
                     seqused_k: Optional[Tensor] = ..., max_seqlen_q: int = ..., max_seqlen_k: int = ...,
                     causal: bool = ..., window: Window = ..., chunk: int = ..., softcap: float = ...,
                     sinks: Optional[Tensor] = ..., scale: Optional[float] = ..., return_lse: Literal[False] = ...,
                     out: Optional[Tensor] = ..., backend: Backend = ..., q_descale: Optional[Tensor] = ...,
                     k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ..., num_splits: int = ...,
                     num_threads: int = ...) -> Tensor: ...
@overload
def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, *,
                     seqused_k: Optional[Tensor] = ..., max_seqlen_q: int = ..., max_seqlen_k: int = ...,
                     causal: bool = ..., window: Window = ..., chunk: int = ..., softcap: float = ...,
                     sinks: Optional[Tensor] = ..., scale: Optional[float] = ..., return_lse: Literal[True],
                     out: Optional[Tensor] = ..., backend: Backend = ..., q_descale: Optional[Tensor] = ...,
                     k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ..., num_splits: int = ...,
                     num_threads: int = ...) -> Tuple[Tensor, Tensor]: ...
@overload
def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, k: Optional[Tensor] = ...,
                           v: Optional[Tensor] = ..., cache_seqlens: Optional[Union[int, Tensor]] = ...,
                           cache_batch_idx: Optional[Tensor] = ..., page_table: Optional[Tensor] = ...,
                           cu_seqlens_q: Optional[Tensor] = ..., max_seqlen_q: int = ..., num_splits: int = ...,
                           causal: bool = ..., window: Window = ..., chunk: int = ..., softcap: float = ...,
                           sinks: Optional[Tensor] = ..., scale: Optional[float] = ...,
                           return_lse: Literal[False] = ..., out: Optional[Tensor] = ..., backend: Backend = ...,
                           q_descale: Optional[Tensor] = ..., k_descale: Optional[Tensor] = ...,
                           v_descale: Optional[Tensor] = ..., num_threads: int = ...) -> Tensor: ...
@overload
def attention_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, k: Optional[Tensor] = ...,
                           v: Optional[Tensor] = ..., cache_seqlens: Optional[Union[int, Tensor]] = ...,
                           cache_batch_idx: Optional[Tensor] = ..., page_table: Optional[Tensor] = ...,
                           cu_seqlens_q: Optional[Tensor] = ..., max_seqlen_q: int = ..., num_splits: int = ...,
                           causal: bool = ..., window: Window = ..., chunk: int = ..., softcap: float = ...,
                           sinks: Optional[Tensor] = ..., scale: Optional[float] = ..., return_lse: Literal[True],
                           out: Optional[Tensor] = ..., backend: Backend = ..., q_descale: Optional[Tensor] = ...,
                           k_descale: Optional[Tensor] = ..., v_descale: Optional[Tensor] = ...,
                           num_threads: int = ...) -> Tuple[Tensor, Tensor]: ...
@overload
def combine(out_partials: Tensor, lse_partials: Tensor, *, out: Optional[Tensor] = ..., out_dtype: object = ...,
            return_lse: Literal[False] = ..., backend: Backend = ..., num_threads: int = ...) -> Tensor: ...
@overload
def combine(out_partials: Tensor, lse_partials: Tensor, *, out: Optional[Tensor] = ..., out_dtype: object = ...,
            return_lse: Literal[True], backend: Backend = ..., num_threads: int = ...) -> Tuple[Tensor, Tensor]: ...
def backend_info() -> List[Tuple[str, bool, str]]: ...
def backend_available(name: Backend) -> bool: ...
def register_torch_ops() -> None: ...
