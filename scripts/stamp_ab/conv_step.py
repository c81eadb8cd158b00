import time, numpy as np, sys
from secinfer.arith.ring import Ring
from secinfer.protocols.rep3 import kernels
ring=Ring(32)
rng=np.random.default_rng(1)
x0=rng.integers(0,2**32,(1,1,28,28),dtype=np.uint64)
x1=rng.integers(0,2**32,(1,1,28,28),dtype=np.uint64)
w=rng.integers(0,2**32,(16,1,5,5),dtype=np.uint64)
attrs={"kernel_shape":[5,5],"strides":[1,1],"pads":[0,0,0,0],"dilations":[1,1],"group":1}
f=kernels.bilinear("Conv",attrs,ring)
if hasattr(kernels,"FixedConv32"):
    g=kernels.FixedConv32(attrs,w); step=lambda v: g(v)
else:
    step=lambda v: ring.reduce(f(v,w))
step(x0)                      # the offline half (same process, as in InputPlan.add_product)
t0=time.thread_time(); y=step(x1); cold=time.thread_time()-t0
ts=[]
for _ in range(200):
    t0=time.thread_time(); step(x1); ts.append(time.thread_time()-t0)
assert np.array_equal(y, ring.reduce(f(x1,w)))
print(f"{kernels.__file__.split('/')[2]} cold {cold*1e6:.0f} warm-med {np.median(ts)*1e6:.0f} warm-min {min(ts)*1e6:.0f}")
