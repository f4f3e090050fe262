"""Names and defaults shared by the statistics and the command line, in a module with no imports, so a
command's options can show them without loading numpy at start-up (docs/METHODS.md §4.3)."""

#: multiple-testing corrections accepted by every function and command
METHODS = ("holm", "bonferroni", "bh", "none")

#: the one default correction
DEFAULT_CORRECTION = "holm"
