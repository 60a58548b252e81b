"""torch.version of the stand-in: its own version (nothing compares it) and the CUDA it names."""

__version__ = '0.0.0+spark.sim'
cuda = '13.0'       # the CUDA the sim's nvidia-smi reports (sparksim/gpu.py DEFAULT_CUDA_VERSION)
