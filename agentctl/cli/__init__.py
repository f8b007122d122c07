"""The programs: one small module each, translating arguments into library calls."""
