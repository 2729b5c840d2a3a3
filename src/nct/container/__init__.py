"""nct.container"""
