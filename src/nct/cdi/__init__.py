"""nct.cdi"""
