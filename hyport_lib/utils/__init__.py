"""Small helpers shared by every stage (imports, redaction, atomic files)."""
