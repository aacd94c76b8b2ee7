# Python 2 code: does not parse under Python 3 (fixture).
import torch
from flash_attn import flash_attn_func

print "moving to", torch.cuda.current_device()
x = torch.zeros(3).cuda()
!pip install flash-attn --no-build-isolation
y = x.to(f"cuda:{rank}")
if x.is_cuda: pass
