"""nct.hook"""
