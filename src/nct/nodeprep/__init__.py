"""What changes the host for GPU containers: kernel modules loaded, device nodes made,
/dev/char links (nct.nodeprep.devinit). nct.driver only reads the node."""
