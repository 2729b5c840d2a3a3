"""nct.config"""
