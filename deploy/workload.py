"""A tiny stand-in for an inference server: matrix products and a softmax, forever.

Started with KINETO_USE_DAEMON=1, it registers with the warpwatch agent at `import torch`; the
agent then traces a window of it every period without any change to this code.
"""

import time

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
a = torch.randn(2048, 2048, device=device)
b = torch.randn(2048, 2048, device=device)
print(f"workload running on {device}", flush=True)
while True:
    c = torch.softmax(a @ b, dim=-1)
    if device == "cuda":
        torch.cuda.synchronize()
    time.sleep(0.01)
