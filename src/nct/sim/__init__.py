"""nct.sim"""
