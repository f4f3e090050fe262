"""Pure numerics: representation and association metrics, tests, corrections,
bootstrap CIs, disparity, Elo and power. No image or model code lives here.

Names are exported lazily (PEP 562) so importing one metric does not import
every module; ``dir(fairvision.stats)`` lists them all.
"""

from __future__ import annotations

from fairvision._lazy import lazy_exports

# public name -> module that defines it
_EXPORTS = {
    # representation (docs/METHODS.md §5.1)
    "nsd": "representation",
    "shannon_evenness": "representation",
    "effective_number": "representation",
    "imbalance_ratio": "representation",
    "representation_summary": "representation",
    # association between attributes
    "npmi": "association",
    "nmi": "association",
    "chi2_independence": "association",
    # chi-square tests (docs/METHODS.md §4.1)
    "chi2_test": "chisquare",
    "cramers_v": "chisquare",
    # result vocabulary
    "TestResult": "results",
    "Estimate": "results",
    "contingency_table": "association",
    # resampling and CIs
    "cluster_bootstrap": "resample",
    "cluster_bootstrap_weights": "resample",
    "group_mean_ci": "resample",
    "group_mean_replicates": "resample",
    "bootstrap_column_sums": "resample",
    "bootstrap_counts": "resample",
    "percentile_ci": "resample",
    "bias_corrected_ci": "resample",
    "BootstrapResult": "resample",
    "wilson_interval": "proportions",
    "vendi_score": "diversity",
    "vendi_terms": "diversity",
    "vendi_ci": "diversity",
    "rarefied_vendi": "diversity",
    "rarefied_vendi_draws": "diversity",
    # multiple comparisons
    "adjust_pvalues": "corrections",
    # model audit (docs/METHODS.md §6)
    "pairwise_mannwhitney": "pairwise",
    "disparity": "pairwise",
    "overall_disparity": "multiclass",
    "intraclass_disparity": "multiclass",
    "recall_matrix": "multiclass",
    "elo": "rating",
    "compare_elo_groups": "rating",
    "overall_disparity_ci": "multiclass",
    "top_pair": "pairwise",
    "significance_summary": "pairwise",
    "top_disparity_row": "pairwise",
    "u_statistics": "pairwise",
    "ODResult": "multiclass",
    "group_summary": "groupwise",
    "cluster_means": "groupwise",
    "kruskal_test": "groupwise",
    "KruskalResult": "groupwise",
    # retrieval parity and power (docs/METHODS.md §8)
    "parity_test": "parity",
    "ParityOptions": "parity",
    "contrast_tests": "parity",
    "knn_search": "knn",
    "risk_ratio": "parity",
    "normalized_rr": "parity",
    "power_grid": "power",
    "detectable_nrr": "power",
    "detectable_curve": "power",
    "catalog_adequacy": "power",
    # exposure and skew of rankings (docs/METHODS.md §8.5)
    "ranking_fairness": "ranking",
    "ranking_measures": "ranking",
    "rank_discounts": "ranking",
    "subject_spread": "spread", "category_flips": "spread", "weighted_medians": "spread", "group_spread": "spread",
    "flip_shares": "spread", "rank_correlation": "spread", "RankCorrelation": "spread",
    "elo_orders": "rating", "expected_score": "rating", "win_rates": "rating", "group_elo": "rating",
    "GroupElo": "rating", "position_bias": "rating", "PositionBias": "rating",
    "paired_differences": "paired", "signed_rank": "paired", "group_heterogeneity": "paired",
    "SignedRankResult": "paired",
    "k_anonymity": "anonymity", "suppression_mask": "anonymity", "AnonymityResult": "anonymity",
    "random_reference": "ranking",
    "RankingFairness": "ranking",
    # planning a model audit (docs/METHODS.md §6.7)
    "planning_alpha": "power_model",
    "effective_n": "power_model",
    "detectable_mean_difference": "power_model",
    "mean_difference_power": "power_model",
    "detectable_rate_difference": "power_model",
    "plan_model_audit": "power_model",
    "catalog_plan": "power_model",
    # classifier rates and criteria (docs/METHODS.md §6.6)
    "confusion_by_group": "rates",
    "confusion_cells": "rates",
    "confusion_replicates": "rates",
    "one_vs_rest": "rates",
    "rates_from_counts": "rates",
    "rate_gap": "rates",
    "roc_auc_by_group": "rates",
    "threshold_sweep": "rates",
    "default_thresholds": "rates",
    # bias diagnosis (docs/METHODS.md §7)
    "fpgrowth": "itemsets",
    "association_rules": "itemsets",
    "van_elteren": "stratified",
    "cochran_mantel_haenszel": "stratified",
    "cmh_from_samples": "stratified",
    "mcnemar": "stratified",
    # outcomes clustered in subjects (docs/METHODS.md §12.1, §12.2)
    "group_vs_rest_design_effect": "clustered",
    "clustered_mcnemar": "clustered",
    # each group against the rest (docs/METHODS.md §12.1)
    "GroupVsRest": "versus_rest",
    "group_vs_rest": "versus_rest",
    "group_vs_rest_pvalue": "versus_rest",
    "adjust_group_tests": "versus_rest",
    "count_flagged": "versus_rest",
    "flag_differences": "versus_rest",
    # near-duplicate search (docs/METHODS.md §13.7)
    "popcount64": "hamming",
    "hamming_distance": "hamming",
    "near_duplicate_pairs": "hamming", "query_matches": "hamming",
    # generative model audits: BiasPainter metamorphic testing (docs/METHODS.md §10)
    "signed_rank_test": "metamorphic",
    "flip_test": "metamorphic",
    "metamorphic_scores": "metamorphic",
    "change_test": "metamorphic",
    "mean_abs_score": "metamorphic",
    "mean_abs_score_ci": "metamorphic",
    "ChangeTestResult": "metamorphic",
    "MetamorphicScores": "metamorphic",
    # bias-transfer studies (docs/METHODS.md §11)
    "disparity_replicates": "multiclass",
    "paired_difference_test": "paired",
    "paired_od_tests": "paired",
    "PairedDifferenceResult": "paired",
    # annotation agreement (docs/METHODS.md §13.4)
    "krippendorff_alpha": "agreement",
    "coincidence_matrix": "agreement",
    "AlphaResult": "agreement",
    "jaccard": "agreement",
    "label_indicators": "agreement",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
