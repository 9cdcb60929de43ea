"""What runs on a machine with a CUDA GPU: ``bash tools/gpu/gpu_verify.sh``."""
