"""nct.oci"""
