"""The programs: one small module each, translating arguments into library calls.

A program loads some fifty modules, its own and click's, whose objects live as long as
it does. While they load, the collector does not look through the young ones every 700
new objects (1.5 ms of a start): program.run() gives the thresholds back (THRESHOLDS)
once they are loaded."""

import gc

THRESHOLDS = gc.get_threshold()
gc.set_threshold(50_000, *THRESHOLDS[1:])
