"""Generative model audits: BiasPainter metamorphic testing of image editors (docs/METHODS.md §10).

``spec`` (the TOML or JSON experiment spec; ``keys``: a misspelt key is an error with a did-you-mean),
``generators`` (one ``edit(image, prompt, seed)`` interface, ``base``: built-in colorimetric editor, folder of
outputs, Python callable, AUTOMATIC1111/Forge HTTP API in ``webui``, diffusers), ``failures`` (why a
generation failed, in plain words), ``assessors`` (skin, age and gender, identity, face lost), ``audit``
(:func:`audit_generative`: generate, assess, score), ``runs`` (the run folders a comparison reads),
``compare`` (:func:`compare_generative`: several generators side by side on one design).
"""

from fairvision.audits.generative.audit import GenerativeResult, audit_generative, score_pairs
from fairvision.audits.generative.compare import GenerativeComparison, compare_generative
from fairvision.audits.generative.failures import GenerationFailed
from fairvision.audits.generative.runs import GenerativeRun, load_run
from fairvision.audits.generative.spec import GenerativeSpec, load_spec, starter_spec

__all__ = ["GenerationFailed", "GenerativeComparison", "GenerativeResult", "GenerativeRun", "GenerativeSpec", "audit_generative",
           "compare_generative", "load_run", "load_spec", "score_pairs", "starter_spec"]
