"""Wave-quantization probe: does fa4's gap to FA2 at D = 256, S = 512 (non-causal, H = 8) depend on
how full the last wave is? B around 32: 2048 CTAs of 64 rows, 264 resident (2 per SM, 132 SMs) ->
7.76 waves. Prints TFLOP/s of fa4 and FA2 per B, timed with peers.py's protocol.
    device: source bench/device_env.sh; python3 bench/wave_probe.py   (after bench/device_run.sh --stage)
"""
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from peers import Fa4, Timer, sdpa, SDPBackend
fa4 = Fa4(os.path.abspath('build-device/lib/libfa4.so'))
timer = Timer(100)
s, h, d = 512, 8, 256
print("B ctas waves fa4 flash ratio")
for b in (24, 28, 31, 32, 33, 34, 36, 40, 48, 64):
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    p = fa4.params(q, k, v, out)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    t = timer.compare_ms({"fa4": lambda: fa4.call(p), "flash": lambda: sdpa(qt, kt, vt, False, SDPBackend.FLASH_ATTENTION)})
    fl = 4 * b * h * s * s * d
    ctas = b * h * s // 64
    print(b, ctas, round(ctas / 264, 2), round(fl / t["fa4"] / 1e9), round(fl / t["flash"] / 1e9), round(t["flash"] / t["fa4"], 3), flush=True)
