"""Probes of vision-language models (docs/METHODS.md §12).

- :mod:`~fairvision.audits.vlm.zero_shot`: zero-shot labels by group from precomputed image and prompt embeddings
  (:func:`audit_vlm`; prompt sets in :mod:`~fairvision.audits.vlm.prompts`);
- :mod:`~fairvision.audits.vlm.variants`: FHIBE's image variants and the paired change of the labels between two
  of them (:func:`compare_variants`);
- :mod:`~fairvision.audits.vlm.vqa`: visual question answering by group (:func:`audit_vqa`), from
  :mod:`~fairvision.audits.vlm.vqa_asking` (asking), :mod:`~fairvision.audits.vlm.vqa_parsing` (parsing the
  answers) and :mod:`~fairvision.audits.vlm.vqa_statistics` (rates by group);
- :mod:`~fairvision.audits.vlm.text_retrieval`: skew and exposure of the images that neutral text queries retrieve
  (:func:`audit_text_retrieval`);
- :mod:`~fairvision.audits.vlm.samples`: the sample-table checks the three share (:class:`SampleOptions`).

Names are exported lazily (PEP 562): importing the question answering probe does not import OpenCV.
"""

from __future__ import annotations

from fairvision._lazy import lazy_exports

# public name -> module that defines it
_EXPORTS = {
    "SampleOptions": "samples",
    "audit_vlm": "zero_shot",
    "VLMResult": "zero_shot",
    "compare_variants": "variants",
    "VariantComparison": "variants",
    "write_variants": "variants",
    "audit_vqa": "vqa",
    "VQAResult": "vqa",
    "TermOptions": "vqa_statistics",
    "audit_text_retrieval": "text_retrieval",
    "TextRetrievalResult": "text_retrieval",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
