"""Responsible curation (docs/METHODS.md §13): diversity, visual statistics, annotation agreement, consent
withdrawal, derived face sets and image quality checks."""
