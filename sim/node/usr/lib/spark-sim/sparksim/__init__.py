"""spark-sim node library: the simulated DGX Spark hardware (state, stand-ins, boot)."""
