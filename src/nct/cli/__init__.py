"""Command-line front ends: thin click (or hand-rolled, on hot paths) wrappers."""
