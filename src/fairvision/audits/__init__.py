"""Audits: compose io, schema, groups, skin, vision, metrics and stats into results."""
