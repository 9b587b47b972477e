# Shared aliases of fa4's type stubs. A tensor is any array fa4 accepts: a NumPy array, a torch
# tensor, a CuPy / JAX / DLPack array; outputs come back in the framework of the input.
from typing import Any, Literal, Optional, Sequence, Tuple, Union

Tensor = Any
Backend = Literal["auto", "cpu", "cuda", "reference"]
Window = Union[Tuple[int, int], Sequence[int]]
FlashWindow = Optional[Union[Tuple[Optional[int], Optional[int]], Sequence[Optional[int]]]]
