"""Bias-transfer studies (docs/METHODS.md §11): controlled training subsets, one model per subset, and the
dataset bias (NSD, NMI, NPMI) set beside the model bias (OD, ID) and accuracy on one common test set.

- :mod:`.design`: the subset designer (:func:`design_subsets`, :func:`write_design`, :func:`read_design`);
- :mod:`.study`: the study table (:func:`audit_transfer`);
- :mod:`.demo`: the runnable study on the bundled FairFace sample (vision extra).
"""

from fairvision.audits.transfer.design import DESIGNS, SubsetDesign, design_subsets, read_design, write_design
from fairvision.audits.transfer.study import TransferStudyResult, audit_transfer, read_predictions

__all__ = ["DESIGNS", "SubsetDesign", "TransferStudyResult", "audit_transfer", "design_subsets", "read_design",
           "read_predictions", "write_design"]
