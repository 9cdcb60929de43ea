import torch.distributed as dist
from utils.distributed import process_group
with process_group(timeout_s=600) as me:
    print("before", flush=True)
    if me.rank == 0:
        dist.barrier()
