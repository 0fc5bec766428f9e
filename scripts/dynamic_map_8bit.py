#!/usr/bin/python3
"""Prints bitsandbytes' signed 8-bit dynamic map (create_dynamic_map(signed=True, max_exponent_bits=7,
total_bits=8), Dettmers 2016, MIT licence) as the C++ hex-float table numerics/block_format.cpp holds
(kDynamicMap8), built from its definition with torch: for i = 0..6 the fp32 midpoints of torch.linspace(0.1, 1,
2^i + 1) times 10^(i-6) (an fp32 tensor operation), both signs, then 0 and 1, ascending."""
import torch

vals = []
for i in range(7):
    b = torch.linspace(0.1, 1, 2**i + 1)
    m = (b[:-1] + b[1:]) / 2.0
    vals += ((10 ** (-6 + i)) * m).tolist() + (-(10 ** (-6 + i)) * m).tolist()
vals = sorted(vals + [0.0, 1.0])
assert len(vals) == 256
print(f"// torch {torch.__version__}")
print(",\n".join(float(torch.tensor(v, dtype=torch.float32)).hex() + "f" for v in vals))
