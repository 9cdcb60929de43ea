from utils.distributed import process_group
with process_group() as me:
    if me.rank == 1:
        raise ValueError("boom on rank 1")
    import torch.distributed as dist; dist.barrier()
