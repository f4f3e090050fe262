"""Bias diagnosis: why a model is worse for a group.

* :func:`model_errors` - direct error modelling (FHIBE; METHODS.md section 4).
* :func:`find_error_patterns` - FP-growth rules for low scores (FHIBE error pattern recognition).
* :func:`control_confounder` - does a disparity survive stratification by a confounder.
* :func:`analyse_counterfactuals` - Thong et al. Table 4 with McNemar tests.
* :func:`colour_transect` - shift skin L* or h* inside the skin mask and verify the shift
  (Thong et al. section 4.3, colorimetric).

Heavy dependencies (scikit-learn, the colour maths) are imported when a function runs.
"""

from fairvision.audits.diagnosis.confounders import ConfounderResult, control_confounder, strata_of
from fairvision.audits.diagnosis.counterfactual import (
    CounterfactualResult,
    TransectResult,
    analyse_counterfactuals,
    colour_transect,
)
from fairvision.audits.diagnosis.error_model import ErrorModelResult, elbow_point, model_errors
from fairvision.audits.diagnosis.patterns import (
    PatternResult,
    add_rule_attribute,
    find_error_patterns,
    low_score_flags,
    rule_mask,
)

__all__ = [
    "ConfounderResult", "CounterfactualResult", "ErrorModelResult", "PatternResult", "TransectResult",
    "add_rule_attribute", "analyse_counterfactuals", "colour_transect", "control_confounder", "elbow_point",
    "find_error_patterns", "low_score_flags", "model_errors", "rule_mask", "strata_of",
]
