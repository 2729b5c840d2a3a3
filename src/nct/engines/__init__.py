"""nct.engines"""
