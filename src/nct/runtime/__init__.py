"""nct.runtime"""
