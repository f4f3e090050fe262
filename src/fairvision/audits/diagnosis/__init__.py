"""Bias diagnosis: why a model is worse for a group (docs/METHODS.md §7).

* :func:`audit_error_model` - direct error modelling (FHIBE; docs/METHODS.md §7.1).
* :func:`audit_error_patterns` - FP-growth rules for low scores (FHIBE error pattern
  recognition; docs/METHODS.md §7.2).
* :func:`audit_confounder` - does a disparity survive stratification by a confounder
  (docs/METHODS.md §7.3).
* :func:`audit_counterfactuals` - Thong et al. Table 4 with McNemar tests (docs/METHODS.md §7.4).
* :func:`audit_colour_transect` - shift skin L* or h* inside the skin mask
  (:func:`fairvision.skin.transect.shift_region_colour`) and verify the shift
  (Thong et al. section 4.3, colorimetric; docs/METHODS.md §7.5).
"""

from fairvision.audits.diagnosis.confounders import ConfounderResult, audit_confounder, strata_of
from fairvision.audits.diagnosis.counterfactual import (
    CounterfactualResult,
    TransectResult,
    audit_colour_transect,
    audit_counterfactuals,
)
from fairvision.audits.diagnosis.error_model import ErrorModelOptions, ErrorModelResult, audit_error_model, elbow_point
from fairvision.audits.diagnosis.patterns import (
    PatternResult,
    add_rule_attribute,
    audit_error_patterns,
    low_score_flags,
    rule_mask,
)

__all__ = [
    "ConfounderResult", "CounterfactualResult", "ErrorModelOptions", "ErrorModelResult", "PatternResult",
    "TransectResult", "add_rule_attribute", "audit_colour_transect", "audit_confounder", "audit_counterfactuals", "audit_error_model",
    "audit_error_patterns", "elbow_point", "low_score_flags", "rule_mask", "strata_of",
]
