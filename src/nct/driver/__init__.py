"""Node discovery: what driver, GPUs, device nodes and driver files this node has."""
