"""Bias diagnosis (METHODS.md section 4; Thong et al. 4.3)."""
