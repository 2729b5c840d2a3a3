"""Tests of the simulated GPU node (nct sim)."""
