"""microbench"""
