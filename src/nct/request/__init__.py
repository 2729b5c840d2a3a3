"""What a container asks for, read from its OCI spec, env and the node config."""
